"""How an agent's training reads in words: its validation curve as a table and the model
card's line on what it observes."""

from __future__ import annotations


def curve_markdown(curve: list[dict]) -> str:
    """The validation backtests during training: reward, Sharpe per bar and trades by step."""
    lines = ["| steps | mean reward / bar | Sharpe / bar | trades | exposure |",
             "|---:|---:|---:|---:|---:|"]
    lines += [f"| {int(p['timesteps'])} | {p.get('mean_reward', float('nan')):.3g} | "
              f"{p.get('sharpe_per_bar', float('nan')):.3f} | {int(p.get('trades', 0))} | "
              f"{p.get('mean_abs_position', float('nan')):.2f} |" for p in curve]
    return "\n".join(lines)


def observes_note(observes: str) -> str:
    """The model card's line on what the agent decides on."""
    return (f"observes: the quantiles per horizon of {observes} (saved beside the policy), "
            "recent returns and volatility, the root's cost and its position")
