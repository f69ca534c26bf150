"""Trading agents: the gymnasium environment (``trading_env``), DQN / PPO training with
stable-baselines3 (``train``) and the exported torch policy (``policy``). ``train`` imports
stable-baselines3, so it is not imported here."""
