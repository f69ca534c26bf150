"""A one-contract trading environment over the training dataset, and its batched backtest.

Timing: the position chosen after observing row ``t``'s close is held from ``t`` to ``t+1``
and earns ``targets[t, 0]`` (the log return from close ``t`` to close ``t+1``). That is a
fill at the next bar: the signal bar's own return is never traded. The observation at ``t``
holds rows ``t-L+1 .. t`` only, so nothing after the decision leaks into it.

Episodes are *stretches*: maximal runs of rows that have a complete history window inside one
segment (root x contract), a finite next return, and no session gap between ``t`` and
``t+1``. Holding across a roll or a session break is therefore impossible by construction.

Observation (flat ``Box``, float32) = the window ``[L, C]`` flattened row-major, clipped to
``+-obs_clip``, followed by a one-hot of the current position (short, flat, long). Its
channels are either a per-row *state* (``models.agents.state``: the forecasters' quantiles, a
few features and the cost; then ``L = 1``), which is what the agents observe, or the observed
features then (optionally) the known inputs of the window's rows (the raw-window layout). A
flat Box keeps SB3 on its plain ``MlpPolicy`` path; ``WindowEncoder`` un-flattens it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from models.sharpe import sharpe_ratio
from models.windows import TrainingData

N_ACTIONS = 3
ACTION_POSITIONS = np.array([-1, 0, 1], dtype=np.int64)  # action index -> position
POSITION_NAMES = ("short", "flat", "long")


class RowState(Protocol):
    """Per-row observation channels (``models.agents.state.ForecastState``)."""

    def compute(self, data: TrainingData, split: str) -> np.ndarray: ...

    def names(self) -> list[str]: ...


@dataclass
class EnvConfig:
    """What the environment shows and charges. ``None`` means "take it from the dataset"."""

    lookback: int | None = None  # history rows per observation; None -> dataset lookback
    include_known: bool = True  # append the known (calendar) inputs of the window rows
    cost_multiplier: float = 1.0  # x the root's one-way cost per contract changed
    reward_scale: float | None = None  # reward = scale x log-return P&L; None -> 1/target_scale
    max_episode_steps: int = 1024  # training episodes only; evaluation runs whole stretches
    session_gap_factor: float | None = 1.5  # a bar spacing > factor x median is a session gap
    obs_clip: float = 10.0  # normalised features are clipped to +-obs_clip
    close_at_end: bool = False  # charge the exit cost when a stretch (not a truncation) ends

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MarketData:
    """One split prepared for the environment, shared by every env copy (no duplication)."""

    split: str
    features: np.ndarray  # float32 [N, C], clipped
    channel_names: list[str]
    returns: np.ndarray  # float64 [N], targets[:, 0]
    cost: np.ndarray  # float64 [N], cost_multiplier x one-way cost per contract
    ts_event: np.ndarray  # int64 [N]
    tradable: np.ndarray  # bool [N]
    stretch_starts: np.ndarray  # int64 [S] first row of each stretch
    stretch_ends: np.ndarray  # int64 [S] last row of each stretch (inclusive)
    lookback: int
    reward_scale: float
    config: EnvConfig

    @property
    def n_channels(self) -> int:
        return int(self.features.shape[1])

    @property
    def obs_dim(self) -> int:
        return self.lookback * self.n_channels + N_ACTIONS

    @property
    def rows(self) -> np.ndarray:
        """Every tradable row, in time order (stretch by stretch)."""
        return np.flatnonzero(self.tradable)

    def observations(self, rows: np.ndarray, positions: np.ndarray | int) -> np.ndarray:
        """Observations for many (row, current position) pairs at once: float32 [B, obs_dim]."""
        rows = np.asarray(rows, dtype=np.int64)
        idx = rows[:, None] + np.arange(-self.lookback + 1, 1)[None, :]
        window = self.features[idx].reshape(rows.shape[0], -1)
        onehot = np.zeros((rows.shape[0], N_ACTIONS), dtype=np.float32)
        pos = np.broadcast_to(np.asarray(positions, dtype=np.int64), rows.shape)
        onehot[np.arange(rows.shape[0]), pos + 1] = 1.0
        return np.concatenate([window, onehot], axis=1)


def prepare_market_data(data: TrainingData, split: str, config: EnvConfig | None = None,
                        state: RowState | None = None) -> MarketData:
    """Validate one split and find its stretches. Raises ``ValueError`` naming the bad field/row.
    With ``state``, each observation is that row's state (lookback 1) and a row is tradable
    only where its state and the next row's are finite."""
    config = config or EnvConfig()
    if split not in data.splits:
        raise ValueError(f"split {split!r} not in the dataset (has {sorted(data.splits)})")
    s = data.splits[split]
    lookback = 1 if state is not None else int(config.lookback or data.lookback)
    if lookback < 1:
        raise ValueError(f"EnvConfig.lookback must be >= 1, got {lookback}")
    features, names, state_ok = _observation_channels(data, split, config, state)
    n = s.n_rows
    targets = np.asarray(s.targets)
    if targets.ndim != 2 or targets.shape[0] != n:
        raise ValueError(f"{split}/targets has shape {targets.shape}, expected [{n}, H]")
    returns = targets[:, 0].astype(np.float64)
    ts = np.asarray(s.ts_event, dtype=np.int64)
    cost = data.cost_log_return(split) * float(config.cost_multiplier)
    if not np.isfinite(cost).all() or (cost < 0).any():
        raise ValueError(f"meta cost_log_return gives a negative or non-finite cost for {split}")
    # the state of t decides, the state of t + 1 is the next observation
    tradable = (_history_ok(np.asarray(s.segment), lookback)
                & _step_ok(np.asarray(s.segment), ts, config, split)
                & np.isfinite(returns) & state_ok)
    tradable[:-1] &= state_ok[1:]

    _check_finite_windows(features, names, tradable, lookback, split)

    edges = np.diff(np.concatenate([[0], tradable.astype(np.int8), [0]]))
    return MarketData(
        split=split,
        features=features,
        channel_names=names,
        returns=returns,
        cost=cost,
        ts_event=ts,
        tradable=tradable,
        stretch_starts=np.flatnonzero(edges == 1).astype(np.int64),
        stretch_ends=(np.flatnonzero(edges == -1) - 1).astype(np.int64),
        lookback=lookback,
        reward_scale=_reward_scale(data, config),
        config=config,
    )


def _observation_channels(data: TrainingData, split: str, config: EnvConfig,
                          state: RowState | None) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(clipped ``[n, C]`` channels, their names, rows whose state is finite): the row's
    state when there is one, else the observed (and known) features."""
    s = data.splits[split]
    n = s.n_rows
    state_ok = np.ones(n, dtype=bool)
    if state is not None:
        raw = np.asarray(state.compute(data, split), dtype=np.float32)
        names = list(state.names())
        if raw.shape != (n, len(names)):
            raise ValueError(f"{split}: state has shape {raw.shape}, expected ({n}, {len(names)})")
        state_ok = np.isfinite(raw).all(axis=1)
        parts = [np.where(state_ok[:, None], raw, 0.0).astype(np.float32)]
    else:
        names = list(data.observed_names)
        parts = [np.asarray(s.observed, dtype=np.float32)]
        if config.include_known and s.known.shape[1] > 0:
            parts.append(np.asarray(s.known, dtype=np.float32))
            names += list(data.known_names)
    features = np.clip(np.concatenate(parts, axis=1), -config.obs_clip, config.obs_clip)
    if len(names) != features.shape[1]:
        names = [f"c_{i}" for i in range(features.shape[1])]
    return features, names, state_ok


def _history_ok(segment: np.ndarray, lookback: int) -> np.ndarray:
    """Rows with a complete history: row t-L+1 is in t's segment (segments are contiguous runs)."""
    n = segment.shape[0]
    ok = np.zeros(n, dtype=bool)
    if n >= lookback:
        ok[lookback - 1 :] = segment[lookback - 1 :] == segment[: n - lookback + 1]
    return ok


def _step_ok(segment: np.ndarray, ts: np.ndarray, config: EnvConfig, split: str) -> np.ndarray:
    """Rows whose next bar exists, is in the same contract and is not across a session break."""
    n = segment.shape[0]
    ok = np.zeros(n, dtype=bool)
    if n > 1:
        same = segment[1:] == segment[:-1]
        dt = np.diff(ts)
        if (dt[same] <= 0).any():
            bad = int(np.flatnonzero(same & (dt <= 0))[0]) + 1
            raise ValueError(f"{split}/ts_event is not increasing within a segment at row {bad}")
        ok[:-1] = same
        if config.session_gap_factor is not None and same.any():
            median = float(np.median(dt[same]))
            ok[:-1] &= dt <= config.session_gap_factor * median
    return ok


def _reward_scale(data: TrainingData, config: EnvConfig) -> float:
    """``config.reward_scale``, else one over the dataset's target scale (1 if it has none)."""
    if config.reward_scale is not None:
        return float(config.reward_scale)
    ts_ = data.target_scale
    return 1.0 / ts_ if np.isfinite(ts_) and ts_ > 0 else 1.0


def _check_finite_windows(
    features: np.ndarray, names: list[str], tradable: np.ndarray, lookback: int, split: str
) -> None:
    """Every row seen by a tradable row's window (and the row after it) must be finite."""
    bad_rows = ~np.isfinite(features).all(axis=1)
    if not bad_rows.any():
        return
    # row r is seen if some tradable t (or t+1, the terminal observation) has t-L+1 <= r <= t+1
    n = tradable.shape[0]
    padded = np.concatenate([tradable.astype(np.int64), np.zeros(lookback, dtype=np.int64)])
    # full convolution: out[k] = sum of padded[k-L .. k]; k = r+L-1 covers t in r-1 .. r+L-1
    seen = np.convolve(padded, np.ones(lookback + 1, dtype=np.int64))[lookback - 1 : lookback - 1 + n] > 0
    hit = np.flatnonzero(bad_rows & seen)
    if hit.size:
        r = int(hit[0])
        col = int(np.flatnonzero(~np.isfinite(features[r]))[0])
        raise ValueError(
            f"{split}: feature {names[col]!r} is not finite at row {r} "
            f"({hit.size} rows inside observation windows are affected)"
        )


class TradingEnv(gym.Env):
    """Short / flat / long one contract over one split; see the module docstring for timing.

    ``mode="train"``: each reset starts at a uniformly random tradable row (seeded through
    ``reset(seed=...)``) and runs up to ``max_episode_steps`` or the end of its stretch.
    ``mode="eval"``: resets walk the stretches in order, each in full, wrapping at the end, so
    ``n_stretches`` episodes cover every tradable row exactly once. Episodes always start flat
    and always end with ``truncated=True`` (data running out is not a terminal state).
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        data: TrainingData | MarketData,
        split: str = "train",
        config: EnvConfig | None = None,
        mode: str = "train",
    ):
        super().__init__()
        if mode not in ("train", "eval"):
            raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
        self.market = data if isinstance(data, MarketData) else prepare_market_data(data, split, config)
        if self.market.stretch_starts.size == 0:
            raise ValueError(
                f"split {self.market.split!r} has no tradable rows for lookback "
                f"{self.market.lookback} (too short, or every row crosses a roll/gap)"
            )
        self.config = self.market.config
        self.mode = mode
        m = self.market
        low = np.concatenate(
            [np.full(m.lookback * m.n_channels, -self.config.obs_clip), np.zeros(N_ACTIONS)]
        ).astype(np.float32)
        high = np.concatenate(
            [np.full(m.lookback * m.n_channels, self.config.obs_clip), np.ones(N_ACTIONS)]
        ).astype(np.float32)
        self.observation_space = spaces.Box(low=low, high=high, dtype=np.float32)
        self.action_space = spaces.Discrete(N_ACTIONS)
        self._tradable_rows = m.rows
        self._stretch_of_row = np.zeros(m.features.shape[0], dtype=np.int64)
        for i, (a, b) in enumerate(zip(m.stretch_starts, m.stretch_ends, strict=True)):
            self._stretch_of_row[a : b + 1] = i
        self._next_stretch = 0
        self._t = -1
        self._end = -1
        self._limit = -1
        self._position = 0

    @property
    def n_stretches(self) -> int:
        return int(self.market.stretch_starts.size)

    def _obs(self) -> np.ndarray:
        return self.market.observations(np.array([self._t]), self._position)[0]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        m = self.market
        if self.mode == "train":
            self._t = int(self._tradable_rows[self.np_random.integers(self._tradable_rows.size)])
            k = self._stretch_of_row[self._t]
            self._end = int(m.stretch_ends[k])
            self._limit = min(self._end, self._t + self.config.max_episode_steps - 1)
        else:
            if seed is not None:
                self._next_stretch = 0
            k = self._next_stretch
            self._next_stretch = (k + 1) % self.n_stretches
            self._t = int(m.stretch_starts[k])
            self._end = self._limit = int(m.stretch_ends[k])
        self._position = 0
        return self._obs(), {"row": self._t, "ts_event": int(m.ts_event[self._t]), "position": 0}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._t < 0:
            raise RuntimeError("call reset() before step()")
        if not self.action_space.contains(int(action)):
            raise ValueError(f"action must be 0 (short), 1 (flat) or 2 (long), got {action!r}")
        m = self.market
        t = self._t
        new_pos = int(ACTION_POSITIONS[int(action)])
        gross = new_pos * m.returns[t]
        cost = m.cost[t] * abs(new_pos - self._position)
        truncated = t >= self._limit
        if truncated and t == self._end and self.config.close_at_end:
            cost += m.cost[t] * abs(new_pos)
        pnl = gross - cost
        info = {
            "row": t,
            "ts_event": int(m.ts_event[t]),
            "position": new_pos,
            "gross_log_return": float(gross),
            "cost": float(cost),
            "log_return": float(pnl),
            # what any position would have earned on this bar (models.agents.replay)
            "return": float(m.returns[t]),
            "unit_cost": float(m.cost[t]),
            "reward_scale": float(m.reward_scale),
        }
        self._position = new_pos
        self._t = t + 1  # row t+1 is always valid to observe: same segment as t
        obs = self._obs()
        if truncated:
            self._t = -1  # stepping past the end needs a reset
        return obs, float(pnl * m.reward_scale), False, bool(truncated), info


PolicyFn = Callable[[np.ndarray], Any]


def as_policy_fn(policy: Any) -> PolicyFn:
    """Accept a callable, an object with ``act(obs)`` (PolicyNet) or an SB3 model."""
    if hasattr(policy, "act"):
        return policy.act
    if hasattr(policy, "predict"):
        return lambda obs: policy.predict(obs, deterministic=True)[0]
    if callable(policy):
        return policy
    raise TypeError(f"cannot turn {type(policy).__name__} into a policy function")


def evaluate_positions(
    policy: PolicyFn | Any,
    data: TrainingData | MarketData,
    split: str = "test",
    config: EnvConfig | None = None,
    batch_size: int = 4096,
    close_at_end: bool = True,
    state: RowState | None = None,
) -> dict[str, np.ndarray]:
    """Backtest a deterministic policy on every tradable row of ``split``, as the env would.

    The policy depends on its own previous position, so it is queried for each row under all
    three possible current positions (batched forwards), then a cheap integer scan picks the
    path. Each stretch starts flat; with ``close_at_end`` the exit at a stretch's last row is
    charged too (an honest backtest must get out before a roll or a session break).
    Without ``config``, the observation layout (lookback, known inputs, clip, gap rule) comes
    from the policy's own metadata and costs are the dataset's at multiplier 1, so every model
    is scored on the same costs. The observation state is ``state``, else the policy's own
    (``policy_state``), else the raw window. Returns per-row arrays: ``rows``, ``ts`` (int64 ns), ``positions`` (int8 -1/0/1),
    ``returns`` (next log return), ``costs``, ``rewards`` (= positions x returns - costs, as
    raw log returns, unscaled) and ``episode_start`` (bool).
    """
    fn = as_policy_fn(policy)
    if config is None and not isinstance(data, MarketData):
        config = policy_layout_config(policy)
    state = state if state is not None else policy_state(policy)
    market = (data if isinstance(data, MarketData)
              else prepare_market_data(data, split, config, state=state))
    expected = getattr(policy, "obs_dim", None)
    if expected is not None and int(expected) != market.obs_dim:
        raise ValueError(
            f"policy expects observations of {expected} values, {market.split} gives "
            f"{market.obs_dim} (lookback {market.lookback} x {market.n_channels} + 3): "
            "pass the EnvConfig it was trained with"
        )
    rows = market.rows
    n = rows.size
    starts = np.zeros(n, dtype=bool)
    ends = np.zeros(n, dtype=bool)
    if n:
        starts[np.searchsorted(rows, market.stretch_starts)] = True
        ends[np.searchsorted(rows, market.stretch_ends)] = True
    positions = _scan_positions(_action_table(fn, market, batch_size), starts)
    return _replay(market, positions, starts, ends if close_at_end else None)


def _replay(market: MarketData, positions: np.ndarray, starts: np.ndarray,
            closes: np.ndarray | None) -> dict[str, np.ndarray]:
    """Per-row returns, costs and rewards of ``positions`` on the tradable rows, each
    stretch entered flat; with ``closes`` the exit at a stretch's last row is charged too."""
    rows = market.rows
    previous = np.where(starts, 0, np.concatenate([[0], positions[:-1]]))
    returns = market.returns[rows]
    unit_cost = market.cost[rows]
    changed = np.abs(positions - previous)
    if closes is not None:
        changed = changed + np.where(closes, np.abs(positions), 0)
    costs = unit_cost * changed
    rewards = positions * returns - costs
    return {
        "rows": rows,
        "ts": market.ts_event[rows],
        "positions": positions.astype(np.int8),
        "returns": returns,
        "costs": costs,
        "rewards": rewards,
        "episode_start": starts,
    }


def _action_table(fn: PolicyFn, market: MarketData, batch_size: int) -> np.ndarray:
    """``[n, 3]`` action of every tradable row under each current position (-1, 0, 1),
    from batched forwards."""
    rows = market.rows
    n = rows.size
    table = np.empty((n, N_ACTIONS), dtype=np.int64)  # action for (row, current position)
    for lo in range(0, n, batch_size):
        r = rows[lo : lo + batch_size]
        obs = np.concatenate([market.observations(r, p) for p in (-1, 0, 1)], axis=0)
        act = np.asarray(_to_numpy(fn(obs)), dtype=np.int64).reshape(-1)
        if act.shape[0] != obs.shape[0] or ((act < 0) | (act >= N_ACTIONS)).any():
            raise ValueError(f"policy must return one action in 0..2 per observation, got {act[:8]}")
        table[lo : lo + r.size] = act.reshape(N_ACTIONS, r.size).T
    return table


def _scan_positions(table: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The path the policy takes through ``table``, flat at each stretch start: an O(N)
    integer scan, the forwards having done the heavy work."""
    positions = np.empty(table.shape[0], dtype=np.int64)
    prev = 0
    for i in range(table.shape[0]):
        if starts[i]:
            prev = 0
        prev = int(ACTION_POSITIONS[table[i, prev + 1]])
        positions[i] = prev
    return positions


LAYOUT_FIELDS = ("lookback", "include_known", "obs_clip", "session_gap_factor")


def policy_state(policy: Any) -> RowState | None:
    """The per-row state a policy observes (``PolicyNet.state``, or an SB3 model's window
    extractor's), ``None`` for a raw-window policy."""
    found = getattr(policy, "state", None)
    if found is not None:
        return found
    sb3 = getattr(policy, "policy", None)
    for extractor in (getattr(sb3, "features_extractor", None),
                      getattr(getattr(sb3, "q_net", None), "features_extractor", None)):
        if getattr(extractor, "state", None) is not None:
            return extractor.state
    return None


def policy_layout_config(policy: Any) -> EnvConfig | None:
    """The observation layout a policy was trained with (PolicyNet ``meta`` or the SB3 window
    extractor's ``observation_meta``), default costs; ``None`` if the policy does not say."""
    meta = getattr(policy, "meta", None)
    if not isinstance(meta, dict):
        sb3 = getattr(policy, "policy", None)
        extractors = (
            getattr(sb3, "features_extractor", None),
            getattr(getattr(sb3, "q_net", None), "features_extractor", None),
        )
        meta = next((e.observation_meta for e in extractors if hasattr(e, "observation_meta")), None)
    env = (meta or {}).get("env")
    if not env:
        return None
    return EnvConfig(**{k: env[k] for k in LAYOUT_FIELDS if k in env})


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def summarize_backtest(bt: dict[str, np.ndarray]) -> dict[str, float]:
    """Scalar figures of an ``evaluate_positions`` result (log-return units, per bar)."""
    r = bt["rewards"]
    n = int(r.size)
    pos = bt["positions"].astype(np.int64)
    prev = np.where(bt["episode_start"], 0, np.concatenate([[0], pos[:-1]])) if n else pos
    return {
        "n_rows": float(n),
        "mean_reward": float(r.mean()) if n else 0.0,
        "total_log_return": float(r.sum()),
        "total_cost": float(bt["costs"].sum()),
        "sharpe_per_bar": sharpe_ratio(r, 1.0) if n > 1 else 0.0,  # not annualised
        "trades": float(np.abs(pos - prev).sum()),
        "mean_abs_position": float(np.abs(pos).mean()) if n else 0.0,
        "hit_rate": float((r[pos != 0] > 0).mean()) if (pos != 0).any() else 0.0,
    }
