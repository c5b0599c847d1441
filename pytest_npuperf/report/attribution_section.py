"""The profiler section of the replay report: which cases got their kernels, which did not and
why, and the other kernels each case's calls launched (casts, format conversions), which are
reported and never added to its duration."""

from __future__ import annotations

from ..measure.policy import METHOD_MSPROF_ORDER, METHOD_MSPROF_SIGNATURE
from ..measure.result import STATUS_UNATTRIBUTED, CaseResult
from .tables import md_table

LISTED = 50


def profiled(results: list[CaseResult]) -> bool:
    return any(r.profile or r.extra_kernels or r.counters or r.status == STATUS_UNATTRIBUTED
               for r in results)


def _extras(result: CaseResult) -> str:
    calls = (result.profile or {}).get("calls") or 0
    parts = []
    for name, count in result.extra_kernels.items():
        per_call = f" ({count / calls:.2g} per call)" if calls else ""
        parts.append(f"{name} x{count}{per_call}")
    return "; ".join(parts)


def attribution_section(results: list[CaseResult]) -> str:
    attributed = [r for r in results if r.counters or r.measured_kernel_type]
    failed = [r for r in results if r.status == STATUS_UNATTRIBUTED]
    extra = [r for r in results if r.extra_kernels]
    methods = sorted({r.method for r in attributed})
    lines = [f"- Cases with profiler kernels: {len(attributed)} (method: "
             f"{', '.join(methods) or '-'})",
             f"- Unattributed cases (row keeps its latency; own timing in the MicroBench "
             f"columns): {len(failed)}",
             f"- Cases whose calls launched other kernels too: {len(extra)}"]
    if any(m in (METHOD_MSPROF_ORDER, METHOD_MSPROF_SIGNATURE) for m in methods):
        lines.append("- The profile had no marker output: kernels were matched by launch order, "
                     "kernel type and shapes (see the method column).")
    parts = ["\n".join(lines)]
    if failed:
        parts.append(md_table(["Case", "Operator", "Reason"],
                              [[r.case_id, r.kernel_type, r.error or "-"]
                               for r in failed[:LISTED]]))
        if len(failed) > LISTED:
            parts.append(f"... and {len(failed) - LISTED} more (all are in the run JSON).")
    if extra:
        parts.append("Other kernels launched inside the cases' ranges (reported, not added):")
        parts.append(md_table(["Case", "Ran", "Other kernels"],
                              [[r.case_id, r.measured_kernel_type or r.kernel_type, _extras(r)]
                               for r in extra[:LISTED]]))
        if len(extra) > LISTED:
            parts.append(f"... and {len(extra) - LISTED} more (all are in the run JSON).")
    return "\n\n".join(parts)
