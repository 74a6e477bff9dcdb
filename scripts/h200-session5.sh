#!/usr/bin/env bash
# Session 5's device calls. From the repository root:
#   source .device-carry/on-device.sh && bash scripts/h200-session5.sh load inductor
# Steps (any order): load - where a process's first kernel load goes (scripts/dsl_load_timing.py);
# inductor - bench-inductor --isolated on both blocks, the out-projection with the no-loader and
# warmup-at-enable rows;
# validate - the standard report through nox; gpu - the GPU test suite; epilogue - bench-epilogue;
# ab - the interleaved residual A/B; fp8 - bench-fp8; sweepfp8 - sweep-fp8 (every valid config,
# the one-partial precise tiles included); choice - how our Inductor choice times
# (scripts/inductor_choice_timing.py); (session 6) inductor-rows - bench-inductor on both blocks, default
# rows; host - scripts/host_path_profile.py; optest - the op host-time GPU test alone;
# sweepfp8-partial - sweep-fp8, precise mode, the one-partial tiles beside the overlapped ones;
# inductor-timing - both blocks with the Inductor-timing A/B row; gpu-inductor - tests/gpu/test_inductor_sm90.py;
# inductor-loss - both blocks with the forced-loss rows (CUTEDSL_UNFUSED_GEMM_BACKENDS A/B); (session 7)
# loss-rounds - the MLP's rows with the forced-loss rows, 3 rounds, medians; loss-outproj - the
# out-projection's forced-loss rows; residual-lost - the MLP with its residual chain made to lose, 2 rounds; outproj-rounds - the
# out-projection's default rows, 3 rounds; workers-ab - forked against spawned compile workers;
# sweepfp8-fast - fast fp8, the ping-pong 128x128 against the cooperative tiles, short and long K;
# epi-barriers - session 7's epilogue A/B: the two-barrier setting's numerics (one barrier is the default
# since session 8), then benches with 2, 1, 2 barriers;
# (session 8) bf16 - bench --shapes prefill --dtypes bfloat16; (session 9) power - scripts/power_probe.py
# (SM clock, power and tensor utilisation at that clock, ours against the peers); clusters - 2x2
# clusters: numerics tests, then scripts/tile_ab.py clusters; wide - the same for 128x320 tiles; peers - scripts/peer_kernels.py (the kernels cuBLAS picks). Logs and JSON go to $OUT.
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
step() { echo "=== $1 ($(date +%T))"; shift; timeout "$@"; echo "=== rc=$?"; }
run() {
  for what in "$@"; do
    case $what in
      load) step "first kernel load" 90 python3 scripts/dsl_load_timing.py ;;
      inductor)
        step "bench-inductor out-proj" 240 python3 -m cutedsl_backend bench-inductor --isolated --no-loader-row --warmup-row \
          --blocks attn_out_proj --json "$out/bench-inductor-outproj.json"
        step "bench-inductor mlp" 260 python3 -m cutedsl_backend bench-inductor --isolated --blocks mlp \
          --json "$out/bench-inductor-mlp.json" ;;
      validate) step "nox validate (standard)" 150 env CUTEDSL_NOX_SYSTEM=1 nox --no-venv -s validate -- \
          --tag standard --out "$out/reports"
        cp "$out"/reports/*/summary.md "$out"/reports/*/report.json "$out/" 2>/dev/null ;;
      gpu) step "gpu tests" 170 python3 -m pytest tests/gpu -n 12 -q -rs -p no:cacheprovider \
          --junitxml="$out/gpu-tests.xml" ;;
      inductor-rows)  # both blocks, default rows only (aten+triton twice, cold, warm)
        step "bench-inductor both blocks" 300 python3 -m cutedsl_backend bench-inductor --isolated \
          --json "$out/bench-inductor.json" ;;
      inductor-timing)  # both blocks with the Inductor-timing A/B row
        step "bench-inductor both blocks, timing A/B" 330 python3 -m cutedsl_backend bench-inductor --isolated \
          --timing-row --json "$out/bench-inductor-timing.json" ;;
      inductor-loss)  # both blocks with every fused chain made to lose: Inductor's backends vs ATen only after
        step "bench-inductor both blocks, forced-loss rows" 400 python3 -m cutedsl_backend bench-inductor --isolated \
          --loss-rows --json "$out/bench-inductor-loss.json" ;;
      loss-rounds)  # session 7: the MLP block, forced losses that run our autotune first, 3 rounds, medians
        step "bench-inductor mlp, forced-loss rows x3" 560 python3 -m cutedsl_backend bench-inductor --isolated \
          --blocks mlp --loss-rows --rounds 3 --json "$out/bench-inductor-loss-rounds.json" ;;
      loss-outproj)  # session 7: the out-projection, forced losses that run our autotune first
        step "bench-inductor out-proj, forced-loss rows" 200 python3 -m cutedsl_backend bench-inductor --isolated \
          --blocks attn_out_proj --rows "cutedsl cold,cutedsl cold unfused-forced,cutedsl cold unfused-forced-aten" \
          --json "$out/bench-inductor-loss-outproj.json" ;;
      outproj-rounds)  # the out-projection's default rows, 3 rounds: its cold compile ratio's spread, and
        # (timeline: benchmark starts/done) where its fused autotune's time goes
        step "bench-inductor out-proj x3" 330 python3 -m cutedsl_backend bench-inductor --isolated \
          --blocks attn_out_proj --rounds 3 --json "$out/bench-inductor-outproj-rounds.json" ;;
      workers-ab)  # session 7: forked compile workers (default) against spawned ones, both blocks, 2 rounds
        step "bench-inductor, worker fork A/B x2" 560 python3 -m cutedsl_backend bench-inductor --isolated \
          --rounds 2 --rows "cutedsl cold,cutedsl cold spawned-workers" --json "$out/bench-inductor-workers-ab.json" ;;
      residual-lost)  # session 7: the MLP with only its residual chain (down-projection) made to lose, 2 rounds
        step "bench-inductor mlp, residual chain lost x2" 360 python3 -m cutedsl_backend bench-inductor --isolated \
          --blocks mlp --rounds 2 --rows "cutedsl cold,cutedsl cold residual-lost,cutedsl cold residual-lost-inductor" \
          --json "$out/bench-inductor-residual-lost.json" ;;
      gpu-inductor) step "gpu tests (inductor)" 200 python3 -m pytest tests/gpu/test_inductor_sm90.py -n 4 -q -rs \
          -p no:cacheprovider --junitxml="$out/gpu-inductor-tests.xml" ;;
      host) step "host path profile" 60 python3 scripts/host_path_profile.py ;;
      optest) step "op host-time test" 60 python3 -m pytest -q -p no:cacheprovider \
          "tests/gpu/test_inductor_sm90.py::test_our_op_adds_little_host_time_over_the_eager_call" ;;
      sweepfp8-partial)  # the precise tiles that keep one k-tile partial, beside the top overlapped ones
        step "sweep-fp8 one-partial tiles" 200 python3 -m cutedsl_backend sweep-fp8 --modes precise \
          --configs cooperative_128x192,pingpong_64x192,cooperative_128x128,cooperative_128x256 \
          --json "$out/sweep-fp8-partial.json" ;;
      sweepfp8-fast)  # session 7's candidate rule: fast fp8 with K <= 4096 on ping-pong 128x128 c2x1 (session
        # 2's sweep: 0.7% / 2.4% faster than the cooperative 128x256 at 4096x14336x4096 tensorwise / rowwise)
        step "sweep-fp8 fast, short and long K" 240 python3 -m cutedsl_backend sweep-fp8 --modes fast \
          --shapes 4096x14336x4096,4096x4096x4096,8192x8192x8192,4096x4096x14336 \
          --configs pingpong_128x128,cooperative_128x256,cooperative_256x128 --json "$out/sweep-fp8-fast.json" ;;
      epi-barriers)  # the epilogue barrier A/B (CUTEDSL_EPI_BARRIERS=1 vs 2): numerics, then bench-fp8 and
        # bench (bf16 prefill) as default / one barrier / default (each ratio against torch in its own process)
        step "two-barrier epilogue numerics" 240 python3 -m pytest tests/gpu/test_epilogue_sm90.py -q -rs \
          -p no:cacheprovider -k epilogue_barrier
        for v in 2 1 2; do
          step "bench-fp8, $v epilogue barriers" 120 env CUTEDSL_EPI_BARRIERS=$v python3 -m cutedsl_backend bench-fp8 \
            --shapes prefill --json "$out/bench-fp8-epi$v-$(date +%H%M%S).json"
          step "bench bf16, $v epilogue barriers" 150 env CUTEDSL_EPI_BARRIERS=$v python3 -m cutedsl_backend bench \
            --shapes prefill --dtypes bfloat16 --json "$out/bench-bf16-epi$v-$(date +%H%M%S).json"
        done ;;
      choice) step "inductor choice timing" 90 python3 scripts/inductor_choice_timing.py ;;
      ab) step "residual A/B" 70 python3 scripts/epilogue_ab.py 3 ;;
      epilogue) step "bench-epilogue" 200 python3 -m cutedsl_backend bench-epilogue --json "$out/bench-epilogue.json" ;;
      bf16) step "bench bf16" 150 python3 -m cutedsl_backend bench --shapes prefill --dtypes bfloat16 \
          --json "$out/bench-bf16.json" ;;
      clusters)  # session 9: 2x2 clusters' numerics tests, then their A/B at the power cap
        step "2x2 cluster tests" 120 python3 -m pytest tests/gpu -q -rs -p no:cacheprovider -k two_by_two
        step "cluster A/B" 360 python3 scripts/tile_ab.py clusters 2 --json "$out/cluster-ab.json" ;;
      wide)  # session 9: 128x320 tiles' numerics tests, then their A/B at the power cap
        step "wide tile tests" 120 python3 -m pytest tests/gpu -q -rs -p no:cacheprovider -k wide_tile
        step "wide tile A/B" 360 python3 scripts/tile_ab.py wide 2 --json "$out/wide-ab.json" ;;
      peers) step "peer kernels" 120 python3 scripts/peer_kernels.py ;;
      power) step "power probe" 200 python3 scripts/power_probe.py 3 --json "$out/power-probe.json" ;;
      fp8) step "bench-fp8" 120 python3 -m cutedsl_backend bench-fp8 --shapes prefill --json "$out/bench-fp8.json" ;;
      sweepfp8) step "sweep-fp8" 420 python3 -m cutedsl_backend sweep-fp8 --json "$out/sweep-fp8.json" ;;
      *) echo "unknown step $what" ;;
    esac
  done
}
run "$@" 2>&1 | grep -v "DeprecationWarning\|warnings.warn\|select_algorithm.py:[0-9]*\]\|triton_mm\|^  [a-z_]* [0-9.]* ms\|^strides:\|^dtypes:\|Autotune Choices\|num_choices\|AUTOTUNE \|TypedStorage\|current_out_size\|pytest_benchmark\|bringing up\|^\[compile\]\|^\[gpu\]" | tee "$out/session5-$(date +%H%M%S).log"
