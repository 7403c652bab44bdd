"""Static guard: reject, with the reason and the line, what harness-pitfalls.md makes checkable in
source. Runs on comment- and string-stripped text, so a ban mentioned in a comment is not a hit; the
string literals are checked separately by the rules that look for paths (/proc/self/mem).

Each rule names the pitfall number of shared/reference/harness-pitfalls.md it defends.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from klineage.parse.text import strip_comments
from klineage.workload import Workload


@dataclass(frozen=True)
class Rule:
    rule_id: str
    pitfall: int
    pattern: re.Pattern
    reason: str
    applies: str = "always"  # "always" | "stateless" (only when the workload forbids state) | "no_half"
    file_scope: bool = False  # match only on lines at file (or namespace) scope
    in_strings: bool = False  # match the string literals (which the code text has blanked), not the code


@dataclass
class Violation:
    rule_id: str
    pitfall: int
    line: int
    text: str
    reason: str


@dataclass
class GuardResult:
    ok: bool
    violations: list[Violation] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "violations": [dict(v.__dict__) for v in self.violations]}

    @property
    def summary(self) -> str:
        if self.ok:
            return "guard passed"
        v = self.violations[0]
        more = f" (+{len(self.violations) - 1} more)" if len(self.violations) > 1 else ""
        return f"line {v.line}: {v.reason} [{v.rule_id}, pitfall {v.pitfall}]{more}"


def _r(rule_id, pitfall, regex, reason, applies="always", file_scope=False, in_strings=False):
    return Rule(rule_id, pitfall, re.compile(regex, re.M), reason, applies, file_scope, in_strings)


_COUNTER_TYPE = r"(?:unsigned[ \t]+|signed[ \t]+)?(?:int|long(?:[ \t]+long)?|short|char|size_t|unsigned|u?int(?:8|16|32|64)_t)"


RULES: tuple[Rule, ...] = (
    _r("vendor_library", 11, r"#\s*include\s*[<\"](cublas|cublasLt|cudnn|cutlass|cute|cufft|cusparse|cusolver|curand_kernel_host|thrust|cub)\b",
       "includes a vendor library header; kernels under test must be standalone CUDA"),
    _r("vendor_call", 11, r"\b(cublas\w*|cudnn\w*|cutlass::|cute::|cufft\w*|cusparse\w*|cusolver\w*)\s*[(:]",
       "calls a vendor library; kernels under test must be standalone CUDA"),
    _r("device_wide_algorithm", 11, r"\b(thrust::|cub::Device\w+)",
       "uses a thrust/cub device-wide algorithm; write the kernel"),
    _r("stream_create", 1, r"\bcudaStreamCreate\w*\s*\(",
       "creates a CUDA stream; launch on the stream argument so timing sees the work"),
    _r("stream_other", 1, r"\b(cudaStreamPerThread|cudaStreamLegacy|cudaStreamWaitEvent|cudaEventCreate\w*|cudaLaunchHostFunc|cudaStreamAddCallback)\b",
       "uses another stream, event or host callback; launch only on the stream argument"),
    _r("graph", 1, r"\b(cudaGraph\w*|cudaStreamBeginCapture\w*)\s*\(",
       "builds or launches a CUDA graph; launch kernels directly on the stream argument"),
    _r("thread", 2, r"(\bstd::(thread|async|jthread)\b|\bpthread_create\b|\bfork\s*\(|#\s*include\s*<(thread|future|pthread\.h)>)",
       "starts a host thread or process; all work must be launched before the entry returns"),
    _r("runtime_interpose", 4, r'^[ \t]*(?:extern\s+"[^"]*"\s+)?(?:__host__\s+)?[\w:]+[\s*&]+(cuda[A-Z]\w*|cu[A-Z]\w*|nvrtc\w+)\s*\([^;{}]*\)\s*\{',
       "defines a function named like a CUDA runtime or driver API call (interposing the harness's timer or allocator); "
       "name your own functions otherwise"),
    _r("device_reset", 4, r"\bcuda(DeviceReset|ThreadExit|DeviceSetCacheConfig|DeviceSetSharedMemConfig|SetDevice|ProfilerStart|ProfilerStop)\s*\(",
       "resets or reconfigures the device or profiler; the harness owns the device"),
    _r("persisting_l2", 13, r"\b(cudaLimitPersistingL2CacheSize|cudaStreamAttributeAccessPolicyWindow|cudaKernelNodeAttributeAccessPolicyWindow|accessPolicyWindow|cudaAccessProperty\w*|cudaCtxResetPersistingL2Cache|cudaLaunchAttributeAccessPolicyWindow)\b",
       "changes persisting-L2 settings, which survive the harness's cache flush"),
    _r("device_limit", 13, r"\bcudaDeviceSetLimit\s*\(",
       "changes a device-wide limit; the harness owns device settings"),
    _r("sync_device", 14, r"\bcuda(DeviceSynchronize|StreamSynchronize|Memcpy|MemcpyToSymbol|MemcpyFromSymbol)\s*\(",
       "synchronizes or copies through the host inside the entry point (use the Async forms on the stream argument)"),
    _r("host_to_device_copy", 5, r"\bcudaMemcpy\w*Async\s*\([^;]*cudaMemcpy(DeviceToHost|HostToDevice)",
       "copies between host and device inside the entry point, a channel for cached results or fingerprints"),
    _r("file_io", 23, r"(\b(fopen|freopen|open|fread|fwrite|fscanf|fprintf|ifstream|ofstream|fstream|mmap|getenv|dlopen|remove|rename)\s*\(|#\s*include\s*<(fstream|filesystem|fcntl\.h|unistd\.h|dlfcn\.h)>)",
       "reads files, the environment or other libraries; a kernel computes from its arguments only"),
    _r("network_process", 23, r"(\b(socket|connect|system|popen|exec[lv]p?e?)\s*\(|#\s*include\s*<(sys/socket\.h|netinet/\w+\.h)>)",
       "opens a socket or runs a program"),
    _r("process_memory", 7, r"(/proc/(self|\d+|%d)/(mem|maps|pagemap)\b|/dev/(k?mem)\b)",
       "reads the process's own memory (heap scraping for the expected answer); compute it from the inputs",
       in_strings=True),
    _r("process_memory_call", 7, r"\b(process_vm_readv|ptrace|dl_iterate_phdr|sbrk)\s*\(",
       "reads the process's own memory (heap scraping for the expected answer); compute it from the inputs"),
    _r("call_counter", 15,
       rf"\bstatic[ \t]+{_COUNTER_TYPE}[ \t]+(\w+)[ \t]*(?:=[^;]*)?;"
       r"(?=[\s\S]*?(?:(?:\+\+|--)[ \t]*\1\b|\b\1[ \t]*(?:\+\+|--|[+-]=)))",
       "counts its own calls in a static variable, which lets it tell the checked calls from the timed ones",
       applies="stateless"),
    _r("host_clock", 15, r"(\bstd::chrono\b|\b(clock_gettime|gettimeofday|time)\s*\(|#\s*include\s*<(chrono|ctime|time\.h|sys/time\.h)>|%globaltimer)",
       "reads a clock, which lets a kernel tell warm-up from timed calls"),
    _r("static_host_state", 5, r"^[^\n]*\bstatic\s+(?!(const|constexpr|__device__|__forceinline__|inline|__global__|__host__|void)\b)[\w:<>]+[\s*&]+\w+\s*(=|;|\[)",
       "keeps host state in a static variable, which survives between calls (cached results, call counters)",
       applies="stateless"),
    _r("global_host_state", 5, r"^(?![ \t]*(static[ \t]+)?(const|constexpr)\b)(?!.*\b(__device__|__constant__|__shared__|__global__|__host__|typedef|using|template|struct|class|return|extern|namespace)\b)[ \t]*[A-Za-z_][\w:<>]*[ \t*&]+[A-Za-z_]\w*[ \t]*(\[[^\]]*\])?[ \t]*(=[^=;\n]*)?;[ \t]*$",
       "declares a mutable file-scope variable, which survives between calls",
       applies="stateless", file_scope=True),
    _r("device_state", 5, r"^(?!.*\b(const|constexpr)\b)[^\n]*\b__device__\s+(?!(inline|__forceinline__|__noinline__|static|void|auto)\b)(?![^\n]*\()[\w:<>\s*]+\w+\s*(\[[^\]]*\])*\s*(=[^;]*)?;",
       "declares a mutable __device__ global, which survives between calls",
       applies="stateless", file_scope=True),
    _r("device_malloc", 5, r"\bcuda(Malloc\w*|Free\w*|HostAlloc|MallocHost|MallocManaged)\s*\(",
       "allocates memory inside the entry point; outputs and scratch come from the harness",
       applies="stateless"),
    _r("half_in_fp32", 10, r"(__float2half\w*|__float2bfloat16\w*|__half2float|__bfloat162float|\b__half2?\b|\b__nv_bfloat162?\b|\bhalf2?\b|__h(add|mul|fma|sub)\w*|#\s*include\s*<cuda_(fp16|bf16|fp8)\.h>|__nv_fp8\w*)",
       "uses half/bfloat16/fp8 arithmetic in a workload whose data is all float32: a precision downgrade",
       applies="no_half"),
)

_HALF_DTYPES = {"float16", "bfloat16"}


def file_scope_lines(text: str) -> set[int]:
    """1-based numbers of lines that start at file scope (namespace and extern "C" blocks count as
    file scope)."""
    scope: set[int] = set()
    depth = 0
    stack: list[bool] = []  # True for braces that open a real (non-namespace) scope
    for lineno, line in enumerate(text.splitlines(), 1):
        if depth == 0:
            scope.add(lineno)
        for m in re.finditer(r"[{}]", line):
            if m.group() == "{":
                before = line[:m.start()]
                real = not re.search(r"\b(namespace(\s+\w+)?|extern\s*\"[^\"]*\")\s*$", before)
                stack.append(real)
                depth += real
            elif stack:
                depth -= stack.pop()
    return scope


def _applies(rule: Rule, workload: Workload | None) -> bool:
    if rule.applies == "always":
        return True
    if workload is None:
        return True
    if rule.applies == "stateless":
        return not workload.stateful
    if rule.applies == "no_half":
        return not (set(workload.dtypes) & _HALF_DTYPES)
    return True


def check_source(source: str, workload: Workload | None = None) -> GuardResult:
    """Scan a kernel source; ok=False with every violation (rule, pitfall, line, reason)."""
    text, strings = strip_comments(source)
    violations: list[Violation] = []
    lines = text.splitlines()
    top = file_scope_lines(text)
    for rule in RULES:
        if not _applies(rule, workload):
            continue
        if rule.in_strings:
            for lineno, lit in strings:
                if rule.pattern.search(lit):
                    violations.append(Violation(rule.rule_id, rule.pitfall, lineno, f'"{lit[:190]}"', rule.reason))
            continue
        for m in rule.pattern.finditer(text):
            lineno = text.count("\n", 0, m.start()) + 1
            if rule.file_scope and lineno not in top:
                continue
            violations.append(Violation(rule.rule_id, rule.pitfall, lineno,
                                        lines[lineno - 1].strip()[:200] if lineno <= len(lines) else "",
                                        rule.reason))
    if workload is not None and f'"C"' not in source:
        violations.append(Violation("abi", 0, 1, "", f'no extern "C" entry point; export {workload.c_signature}'))
    elif workload is not None and not re.search(rf"\b{re.escape(workload.entry)}\s*\(", text):
        violations.append(Violation("abi", 0, 1, "", f"entry point {workload.entry} not defined; export {workload.c_signature}"))
    violations.sort(key=lambda v: (v.line, v.rule_id))
    return GuardResult(ok=not violations, violations=violations)
