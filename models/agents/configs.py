"""Configs of the DQN and PPO agents; the Dagster run configs mirror these names and
``from_dict`` refuses a field they do not know."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from foxhunt_pipeline.basics.config_fields import check_known_fields
from models.agents.trading_env import EnvConfig, MarketData


@dataclass
class AgentConfig:
    """Fields shared by both agents (Dagster Config classes mirror these names)."""

    total_timesteps: int = 200_000
    # "forecasts": the forecasters' quantiles + a few features + cost; "window": raw window
    observation: str = "forecasts"
    learning_rate: float = 3e-4
    # rewards are immediate; the future matters only through later position-change costs
    gamma: float = 0.9
    net_arch: list[int] = field(default_factory=lambda: [64, 64])
    encoder: str = "mlp"  # "mlp" or "conv"
    encoder_hidden: int = 64
    conv_channels: int = 32
    activation: str = "relu"
    seed: int = 0
    device: str = "auto"
    eval_freq: int = 10_000  # env steps between validation backtests (0: only at the end)
    # keep the policy of the best validation backtest (mean net reward per bar) instead of
    # the last. Off by default: on the demo's one-day validation split the choice is noise
    # (walk-forward, seeds 7 and 8: DQN Sharpe CI low 11.0 -> 3.1 and 2.4 -> -1.6, PPO
    # -0.6 -> 4.2 and -0.8 -> -6.3); it pays with a validation split of several days
    keep_best: bool = False
    # epochs of imitating the forecasters' own rule first (each agent's own default and why)
    imitate_epochs: int = 0
    env: EnvConfig = field(default_factory=EnvConfig)
    # how the n_envs copies step: "dummy" (in this process, best on few cores) or "subproc"
    # (one process each, SB3's SubprocVecEnv: rollouts collected in parallel on a big box)
    vec_env: str = "dummy"
    # the most recent rows (all roots together, shared evenly) of the train and validation
    # splits the agent learns and validates on; its state (the forecasters' quantiles) is
    # computed for those rows only, so a longer history costs the agent nothing more than
    # its budget of steps can use. None: the whole split
    train_rows: int | None = None
    val_rows: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        check_known_fields(cls, d)
        kw = dict(d)
        if isinstance(kw.get("env"), dict):
            kw["env"] = EnvConfig(**kw["env"])
        return cls(**kw)

    def encoder_config(self, market: MarketData) -> dict[str, Any]:
        return {
            "lookback": market.lookback,
            "n_channels": market.n_channels,
            "kind": self.encoder,
            "hidden": self.encoder_hidden,
            "conv_channels": self.conv_channels,
        }


@dataclass
class DQNConfig(AgentConfig):
    """DQN; these defaults are the ``dqn_agent`` asset's too."""

    learning_rate: float = 5e-4
    # holding is free and every change pays, so a position's value lies in the bars it is
    # held: walk-forward Sharpe CI low, seeds 7 / 8 / 9, 11.0 / 2.4 / -0.6 at gamma 0.5 and
    # 5.6 / 7.0 / 3.6 at 0.9 (from scratch); 12.2 / 13.3 / 6.8 at 0.9 after imitation
    gamma: float = 0.9
    n_envs: int = 1  # SB3 DQN steps every copy per train_freq step, filling one buffer
    buffer_size: int = 100_000  # env steps kept (x 9 transitions with replay_all_positions)
    replay_all_positions: bool = True  # every (held, chosen) position per step (agents.replay)
    learning_starts: int = 1_000
    batch_size: int = 64
    train_freq: int = 4
    gradient_steps: int = 1
    target_update_interval: int = 2_000
    exploration_fraction: float = 0.2
    exploration_final_eps: float = 0.02
    # epochs of DQfD pre-training on the forecasters' own rule before DQN
    # (models.agents.imitation.imitate_rule_q): walk-forward Sharpe CI low, seeds 7 / 8 / 9,
    # 12.2 / 13.3 / 6.8 after 10 epochs, 5.6 / 7.0 / 3.6 from scratch (gamma 0.9). 0, or
    # observation="window" (no forecasts to imitate): DQN starts from scratch
    imitate_epochs: int = 10

    @classmethod
    def demo(cls) -> DQNConfig:
        """Small enough for ``foxhunt demo`` on a laptop CPU (tens of seconds)."""
        return cls(total_timesteps=20_000, learning_rate=5e-4, gamma=0.9, learning_starts=500,
                   target_update_interval=500, buffer_size=20_000, eval_freq=5_000,
                   net_arch=[64], encoder_hidden=64)


@dataclass
class PPOConfig(AgentConfig):
    """PPO; these defaults are the ``ppo_agent`` asset's too."""

    # after cloning the rule, a smaller step keeps PPO near what it cloned while it learns
    # when a change pays: walk-forward Sharpe CI low, data seeds 7 / 8 / 9 x agent seeds
    # 0 / 1 / 2, all nine between 3.6 and 10.0 at 3e-4; at 1e-3 seed 0 gave 2.4 / -0.3 / 5.3
    learning_rate: float = 3e-4
    gamma: float = 0.5
    activation: str = "tanh"
    n_envs: int = 2
    n_steps: int = 512  # per env, per rollout
    batch_size: int = 256
    n_epochs: int = 5
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    # epochs of imitating the forecasters' own rule before PPO (models.agents.imitation):
    # walk-forward Sharpe CI low, seeds 7 / 8 / 9, 13.1 / 10.5 / -0.8 after 3 epochs and
    # 7.7 / 12.0 / 1.0 after 10 (the band rule depends on the held position, which takes
    # more epochs to learn than the symmetric rule did). 0, or observation="window" (no
    # forecasts to imitate): PPO starts from scratch
    imitate_epochs: int = 10

    @classmethod
    def demo(cls) -> PPOConfig:
        return cls(total_timesteps=20_000, learning_rate=3e-4, gamma=0.5, ent_coef=0.0, n_envs=2,
                   n_steps=512, eval_freq=5_000, net_arch=[64], encoder_hidden=64)
