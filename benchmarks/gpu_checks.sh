#!/usr/bin/env bash
# Every GPU check in one script, for a CUDA machine (the session GPU, a GPU box):
# the `gpu` tests of the models, then the GPU figures of the benchmarks.
#   bash benchmarks/gpu_checks.sh            # logs and JSON under $OUT (default /tmp/gpu-checks)
# Needs torch with CUDA, stable-baselines3 and gymnasium; pytorch-forecasting is optional
# (its side of the TFT comparison). With WHEELS=<dir>, wheels there are installed first
# into /tmp/site (a machine without an index). Each step has a timeout so one hang does not
# take the others' time.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-checks}
mkdir -p "$OUT"
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 FOXHUNT_PROFILE=fast
nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
echo "=== gpu tests"
timeout 180 python3 -m pytest -p no:cacheprovider -q -rs -m gpu \
  tests/models/mamba2/test_mamba2.py tests/models/evaluation/test_running_cost.py \
  tests/models/tft/test_tft.py tests/models/agents/test_agents.py \
  tests/models/training/test_training.py tests/models/quantization/test_quantization_real_models.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -30
echo "=== TFT vs pytorch-forecasting on CUDA"
timeout 150 python3 benchmarks/tft_vs_pytorch_forecasting.py --device cuda --calls 300 --json "$OUT/tft_cuda.json" > "$OUT/tft_cuda.log" 2>&1; echo "rc=$?"; tail -15 "$OUT/tft_cuda.log"
echo "=== agents' policy latency (CPU and CUDA)"
timeout 90 python3 benchmarks/agents.py --quick --skip-training --json "$OUT/agents.json" > "$OUT/agents.log" 2>&1; echo "rc=$?"; grep policynet "$OUT/agents.log"
echo "=== half precision on CUDA (batch 256)"
timeout 120 python3 benchmarks/quantization.py --quick --json "$OUT/quant.json" > "$OUT/quant.log" 2>&1; echo "rc=$?"; grep "GPU batch" "$OUT/quant.log"
