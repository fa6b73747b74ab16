#!/bin/bash
# One device call: the crossover study (torch-eager, jax-jit; CPU and GPU taking turns), then a
# cuda bench of mlp, cnn and rnn-caption. The image's own frameworks (no network there).
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
START=$(date +%s)
{ nvidia-smi; nvidia-smi -q | head -40; lscpu | head -20; git log -1 --oneline 2>/dev/null; } > $OUT/machine.txt 2>&1
python3 -c "import torch, jax, flax, sys; print(sys.version); print('torch', torch.__version__, torch.version.cuda); print('jax', jax.__version__, jax.devices()); print('flax', flax.__version__)" >> $OUT/machine.txt 2>&1
python3 -m harness list >> $OUT/machine.txt 2>&1
echo "== crossover $(date -u +%T)"
timeout -s TERM ${XO_LIMIT:-300} python3 -m harness crossover --budget ${XO_BUDGET:-4m} --timeout 120 \
  --out reports --run-id crossover 2>&1 | tee $OUT/crossover.txt | tail -n 25
echo "crossover exit ${PIPESTATUS[0]} after $(( $(date +%s) - START )) s"
echo "== bench $(date -u +%T)"
LEFT=$(( ${TOTAL:-575} - ($(date +%s) - START) ))
[ $LEFT -gt 150 ] && timeout -s TERM $LEFT python3 -m harness bench --device cuda --workload mlp,cnn,rnn-caption \
  --framework ${BENCH_FRAMEWORKS:-torch-eager,jax-jit,flax-nnx-cached} --budget $(( LEFT - 75 ))s --timeout 150 \
  --out reports --run-id bench-cuda 2>&1 | tee $OUT/bench.txt | tail -n 25
echo "bench exit ${PIPESTATUS[0]} after $(( $(date +%s) - START )) s"
tar czf $OUT/runs.tgz $(ls -d reports/crossover reports/bench-cuda 2>/dev/null)
ls -la $OUT
