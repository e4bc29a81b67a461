# The GPU runs prepared while no device was lent (sessions 15-18), for one device call:
#   bash benchmarks/pending_gpu_runs.sh [rope] [timeline_b8] [suffix_b2_b4]   (none: all three)
# from the repository root of main. `rope` needs the worktree of branch exp/rope-in-attention
# at .exp/rope, carried with the call (git worktree add -f .exp/rope exp/rope-in-attention).
# No LeRobot in these steps, so no wheels to carry. 8 files come back: 5 from rope, 1 from
# timeline_b8, 2 from suffix_b2_b4. Each step has its own time limit.
#   rope          the fused RoPE suffix attention with spill-free tiles, A/B at batch 1 and 8,
#                 and at batch 1 with the other cameras encoded ahead (the branch's commands.sh)
#   timeline_b8   where batch 8's time goes, kernel by kernel (graph_timeline.py --batch 8)
#   suffix_b2_b4  the suffix attention at batches 2-4 with 64 x 32 tiles (no register spills in
#                 register_audit) against the committed 64 x 64 (36 B spilled per thread)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
for step in ${*:-rope timeline_b8 suffix_b2_b4}; do
    echo "== $step"
    case $step in
    rope)
        (cd .exp/rope && PYTHONPATH=$PWD timeout 420 bash benchmarks/exp_rope_in_attention/commands.sh) ;;
    timeline_b8)
        (cd benchmarks && timeout 150 python3 graph_timeline.py --batch 8 --calls 2 \
            --json "$OUT/timeline_b8.json" 2>&1 | grep -v Warn | head -20 | cut -c1-160) ;;
    suffix_b2_b4)
        (cd benchmarks && timeout 240 python3 engine_ab.py --batches 2,4 --frame-pool 8 \
            --iters 100 \
            --tuned records/2026-12-05-register-audit-cpu/suffix_b2_b4_64x32_tiles.json \
            --json "$OUT/ab_suffix_b2_b4.json" > "$OUT/ab_suffix_b2_b4.log" 2>&1
         grep "^batch\|^B against" "$OUT/ab_suffix_b2_b4.log" | cut -c1-400) ;;
    *)
        echo "unknown step $step (rope, timeline_b8, suffix_b2_b4)"; exit 2 ;;
    esac
done
