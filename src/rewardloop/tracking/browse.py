"""Where MLflow's UI shows a results folder's runs table (`make mlflow-ui` prints it before the server starts).

MLflow 3.17's UI ignores the experiment's ``mlflow.experimentKind`` tag: its view follows a
browser-side setting, ``workflowType`` (``genai``, the default, or ``machine_learning``), read from
the page address's query, else from the browser's local storage (the sidebar's "GenAI / Model
training" switch). An experiment opened without it lands on the GenAI "Overview" (traces, a "Detect
issues" pop-up) and run pages say "Evaluations". The address below opens the experiment's **Runs**
tab with ``workflowType=machine_learning`` (the frontend's own tab route and query parameter, as in
mlflow/server/js of the pinned version).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rewardloop import results_layout as layout
from rewardloop.tracking.store import DEFAULT_RESULTS, DEFAULT_TRACKING_URI

UI_URL = "http://127.0.0.1:5000"  # `make mlflow-ui`'s host and port
WORKFLOW_QUERY = "workflowType=machine_learning"  # the model-training view, not the GenAI pages


def runs_table_url(ui_url: str, experiment_id: str) -> str:
    """The address of an experiment's runs table in the model-training view (the UI routes in the fragment)."""
    return f"{ui_url.rstrip('/')}/#/experiments/{experiment_id}/runs?{WORKFLOW_QUERY}"


def tracked_experiments(results: str | Path = DEFAULT_RESULTS) -> list[tuple[str, str, str]]:
    """(tracking URI, experiment id, experiment name) of the parent runs under ``results`` (the run's, or
    each run's of a fan-out), from their markers, once each, in order; runs whose tracking failed are left out."""
    roots = [Path(results), *layout.run_roots(results)]
    found = {}
    for root in roots:
        try:
            marker = json.loads(Path(layout.RunLayout(root).tracking_run).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(marker, dict) and marker.get("status") == "ok" and marker.get("experiment_id"):
            key = (marker["tracking_uri"], str(marker["experiment_id"]))
            found.setdefault(key, marker.get("experiment", ""))
    return [(uri, experiment_id, name) for (uri, experiment_id), name in found.items()]


def ui_lines(results: str | Path = DEFAULT_RESULTS, ui_url: str = UI_URL) -> list[str]:
    """What to open: the runs table of each experiment logged into the default store (which the UI at
    ``ui_url`` serves), or into a server (its own address); the UI's front page when none is."""
    lines, served = [], False
    for uri, experiment_id, name in tracked_experiments(results):
        if uri == DEFAULT_TRACKING_URI:
            lines.append(f"MLflow: experiment {name!r}, runs table: {runs_table_url(ui_url, experiment_id)}")
            served = True
        elif uri.startswith(("http://", "https://")):
            lines.append(f"MLflow: experiment {name!r} is on the server {uri}: {runs_table_url(uri, experiment_id)}")
    if not served:
        lines.append(f"MLflow: {ui_url}/ (no run tracked into {DEFAULT_TRACKING_URI} under {results}/ yet; add "
                     f"?{WORKFLOW_QUERY} to an experiment's address for its runs table)")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=DEFAULT_RESULTS, help=f"the results folder (default: {DEFAULT_RESULTS})")
    parser.add_argument("--url", default=UI_URL, help=f"the UI's address (default: {UI_URL})")
    args = parser.parse_args(argv)
    print("\n".join(ui_lines(args.results, args.url)), flush=True)


if __name__ == "__main__":
    main()
