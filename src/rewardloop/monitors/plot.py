"""The report's health figure (report/health.png): trained vs gold rewards and every image-health
statistic across iterations, the base model's value as a dashed line, breached iterations marked."""

from __future__ import annotations

import math

from rewardloop.monitors.history import rows
from rewardloop.monitors.image_health import STATISTICS


def _values(table: list[dict], key: str) -> list[float]:
    return [row.get(key) if row.get(key) is not None else math.nan for row in table]


def plot_health(results, out_path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rewardloop.artifacts import atomic_path

    table = rows(results)
    iterations = [row for row in table if row["iteration"] >= 0]
    base = next((row for row in table if row["iteration"] == -1), {})
    x = [row["iteration"] for row in iterations]
    golds = sorted({k for row in table for k in row if k.startswith("gold_")})
    fig, axes = plt.subplots(2, 4, figsize=(16, 7), constrained_layout=True)
    rewards, *panels = axes.ravel()
    # Trained and gold rewards as the change from the base: their scales differ.
    for key, label in [("eval_reward", "trained reward (eval)")] + [(g, g.removeprefix("gold_") + " (gold)") for g in golds]:
        start = base.get(key)
        rewards.plot(x, [v - start if start is not None else math.nan for v in _values(iterations, key)],
                     marker="o", label=label)
    rewards.axhline(0, color="grey", linestyle="--", linewidth=1)
    rewards.set_title("reward change from the base model")
    rewards.legend(fontsize=8)
    for ax, stat in zip(panels, STATISTICS):
        ax.plot(x, _values(iterations, stat), marker="o", label="eval images")
        if any(not math.isnan(v) for v in _values(iterations, f"rollout_{stat}")):
            ax.plot(x, _values(iterations, f"rollout_{stat}"), marker=".", linestyle=":", label="rollouts")
        if base.get(stat) is not None:
            ax.axhline(base[stat], color="grey", linestyle="--", linewidth=1, label="base model (eval)")
        ax.set_title(stat.replace("_", " "))
    panels[0].legend(fontsize=8)
    breached = [row["iteration"] for row in iterations if row["breached"]]
    for ax in axes.ravel()[:1 + len(STATISTICS)]:
        for it in breached:
            ax.axvspan(it - 0.4, it + 0.4, color="red", alpha=0.12)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
    axes.ravel()[-1].axis("off")
    if breached:
        axes.ravel()[-1].text(0, 0.5, "guard breaches (red):\n" + "\n".join(
            f"iteration {row['iteration']}: {row['guard']}" for row in iterations if row["breached"]),
            fontsize=9, va="center", wrap=True)
    fig.suptitle(f"{results}: image health and gold rewards per iteration")
    with atomic_path(out_path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
