"""Quantization assets: fp32 / int8 / fp16 / bf16 variants of each model, scored on the same
test split, exported as artifacts that load without the training code, and registered in
MLflow as versions tagged with their precision."""

from assets.common.quantized_asset import quantized_asset

tft_quantized = quantized_asset("tft")
mamba2_quantized = quantized_asset("mamba2")
dqn_quantized = quantized_asset("dqn")
ppo_quantized = quantized_asset("ppo")
