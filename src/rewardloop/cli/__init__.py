"""The `rewardloop` command (main: its parser and dispatch) and the subcommands that are more than a call
into another wing: score, rescore, benchmark, serve-reward."""
