"""Plain-text rendering of gate results and workloads for the CLI."""
from __future__ import annotations

from klineage.workload import shape_key


def _si(x: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if x >= scale:
            return f"{x / scale:.2f} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def format_gate_result(name: str, res) -> str:
    lines = [f"{name}: {res.status.value} ({res.source})"]
    if res.error_message:
        lines.append(f"  reason: {res.error_message}")
    comp = res.compile or {}
    for r in comp.get("resources", []):
        lines.append(f"  ptxas {r['name'][:60]}: {r['registers']} regs, {r['shared_bytes']} B smem, "
                     f"{r['stack_bytes']} B stack, spills {r['spill_store_bytes']}/{r['spill_load_bytes']} B")
    for c in res.correctness:
        seeds = c["seeds"]
        worst = min((o["matched_fraction"] for s in seeds for o in s["outputs"].values()), default=1.0)
        err = max((o["max_abs_err"] for s in seeds for o in s["outputs"].values()), default=0.0)
        lines.append(f"  {c['kind']:<9} {shape_key(c['shape']):<28} {'ok ' if c['ok'] else 'BAD'} "
                     f"{len(seeds)} seeds, min matched {worst:.6f}, max abs err {err:.3g}")
    for t in res.timing:
        frac = t.get("bandwidth_fraction")
        lines.append(
            f"  time {shape_key(t['shape'])}: {t['latency_us']:.2f} us median "
            f"(trials {', '.join(f'{x:.2f}' for x in t['trial_medians_us'])}; spread {100 * t['spread']:.2f}%), "
            f"vendor {t['vendor_latency_us']:.2f} us, speedup {t['speedup_vs_vendor']:.3f}x")
        rate = f"  rate {_si(t['achieved_bytes_per_s'], 'B/s')}"
        if frac is not None:
            rate += f" = {100 * frac:.1f}% of measured copy {_si(t['copy_bandwidth_bytes_per_s'], 'B/s')}"
        if t.get("flops_fraction"):
            rate += f"; {_si(t['achieved_flops_per_s'], 'FLOP/s')} = {100 * t['flops_fraction']:.1f}% of peak"
        lines.append(rate)
    if res.env and res.env.get("gpu"):
        e = res.env
        lines.append(f"  on {e.get('gpu')} driver {e.get('driver')} nvcc {e.get('nvcc')} torch {e.get('torch')}")
    return "\n".join(lines)


def format_workload(wl) -> str:
    t = wl.tolerance
    lines = [f"{wl.name} ({wl.family}, {', '.join(wl.dtypes)})", f"  {wl.c_signature}",
             f"  tolerance rtol {t.rtol} atol {t.atol} (scaled by rms of reference), min matched {t.min_matched}",
             f"  vendor reference: {wl.vendor_name}"]
    for kind, s in wl.all_shapes():
        lines.append(f"  {kind:<9} {shape_key(s):<28} {wl.bytes_moved(s):>14,} bytes {wl.flops(s):>16,} FLOP")
    return "\n".join(lines)


def format_mine_summary(summary: dict) -> str:
    lines = []
    for l in summary["lineages"]:
        lines.append(f"{l['workload']}/{l['proposer']} [{l['lineage_id'][:12]}]: {l['steps']} steps, "
                     f"{l['rejections']} rejections, {l['termination']}"
                     + (f" (left: {', '.join(l['remaining'])})" if l["remaining"] else ""))
        if l["mechanisms"]:
            lines.append("  removed: " + " -> ".join(l["mechanisms"]))
    ev = summary["evaluations"]
    lines.append(f"evaluations: {ev['total']} " + ", ".join(f"{k} {v}" for k, v in sorted(ev["by_source"].items())))
    ph = summary["phases"]
    rate = ph["compile_cache_hit_rate"]
    lines.append(f"wall {ph['wall_s']:.1f} s; compile {ph['compile_s']:.1f} s over {ph['compile_requests']} requests "
                 f"(cache hit rate {'-' if rate is None else f'{100 * rate:.0f}%'}); correctness "
                 f"{ph['correctness_s']:.1f} s; timing {ph['timing_s']:.1f} s")
    lines.append(f"skills in the library: {len(summary['skills'])}")
    if summary["missing"]:
        lines.append(f"NOT REPLAYED ({len(summary['missing'])} evaluations had no record):")
        for m in summary["missing"]:
            lines.append(f"  {m['workload']} kernel {m['kernel_hash'][:12]} ({m.get('origin') or 'derived'})")
    return "\n".join(lines)


def format_lineage_row(l: dict) -> str:
    return (f"{l['lineage_id'][:12]}  {l['workload_name']:<14} {l['proposer']:<9} {len(l['transitions']):>3} steps "
            f"{len(l['rejections']):>3} rejections  {l['termination']}"
            + (f" (left: {', '.join(l['remaining'])})" if l["remaining"] else ""))


def format_lineage(l: dict) -> str:
    lines = [format_lineage_row(l), "states (0 = the starting kernel; each next state has one mechanism fewer):"]
    for st in l["states"]:
        lat = ", ".join(f"{x:.1f}" for x in st.get("latency_us", []))
        lines.append(f"  [{st['idx']}] {st['kernel_hash'][:12]} {st.get('status', '')} {lat and lat + ' us'}")
    lines.append("transitions (forward speedup = simpler / richer latency):")
    for t in l["transitions"]:
        sp = ", ".join(f"{e['speedup']:.3f}x" for e in t["effects"])
        lines.append(f"  step {t['step']}: -{t['mechanism']} @ {t['locus']}  forward {sp}")
    if l["rejections"]:
        lines.append("rejections:")
        for r in l["rejections"]:
            lines.append(f"  step {r['step']}: {r['mechanism']} @ {r['locus']}: {r['kind']}: {r['message'][:160]}")
    return "\n".join(lines)


def format_skill_row(s: dict) -> str:
    e = s["card"]["effects"]
    return (f"{s['skill_id']}  {s['name']:<40} {e['median_speedup']:.3f}x  "
            f"{len(s['card']['evidence'])} step(s)  {', '.join(s['card']['scope']['platforms'])}")
