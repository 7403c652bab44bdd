"""A scripted model server on loopback, so whole runs (`mine --proposer llm`, `baseline run`,
`apply --materializer llm`) go end to end through the real SDKs with no key and no network.

It speaks the Anthropic Messages API (POST .../v1/messages) and the OpenAI chat completions API
(POST .../chat/completions) and answers from a script: a list of replies, each served once,

    {"text": "...", "when": ["...", ...]}            an answer; the first unused reply all of whose
                                                      `when` strings appear in the request's prompt
                                                      (system + messages) is served; no `when`: any
    {"status": 429, "error": "rate_limit_error", "headers": {"retry-after": "1"}, "when": [...]}

and an optional `default` reply, served (never used up) when none matches; without one the server
answers HTTP 500. Usage is reported as a real server would (4 characters a token): the prompt's
tokens, and for an Anthropic request whose system block is cacheable, a cache write the first time
that system text is seen and a cache read afterwards; the answer's tokens as output.

Tests can also push raw replies (status, body, headers) on `server.script`; those go first, in order.

The second half writes scripts from a workload's version ladder (naive.cu, versions/*.cu, expert.cu):
`mine_script` answers a backward llm walk from expert.cu down to naive.cu, one rung per step, and
`baseline_script` a baseline run from naive.cu that is handed the ladder's rungs one by one.

    python -m tests.support.scripted_server SCRIPT.json [--port N]      serve a script file
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHARS_PER_TOKEN = 4


# ---------------------------------------------------------------- raw replies (status, body, headers)

def anthropic_reply(text, input_tokens=1000, output_tokens=500, cache_write=0, cache_read=0, model="claude-sonnet-4-5"):
    return (200, {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
                  "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                  "stop_sequence": None,
                  "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                            "cache_creation_input_tokens": cache_write,
                            "cache_read_input_tokens": cache_read}}, {})


def openai_reply(text, prompt_tokens=1000, completion_tokens=500, cached=0, model="claude-sonnet-4-5"):
    return (200, {"id": "chatcmpl-1", "object": "chat.completion", "model": model,
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                               "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                            "prompt_tokens_details": {"cached_tokens": cached}}}, {})


def error_reply(status, kind, headers=None):
    return (status, {"type": "error", "error": {"type": kind, "message": f"{kind} (scripted)"}}, headers or {})


def tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def load_script(path: str | Path) -> tuple[list[dict], dict | None]:
    """(replies, default) of a script file; ValueError naming what is wrong."""
    raw = json.loads(Path(path).read_text())
    if not isinstance(raw, dict) or not isinstance(raw.get("replies"), list):
        raise ValueError(f"{path}: expected a JSON object with a list `replies`")
    for i, r in enumerate(raw["replies"] + ([raw["default"]] if raw.get("default") else [])):
        if not isinstance(r, dict) or ("text" in r) == ("error" in r):
            raise ValueError(f"{path}: reply {i} needs exactly one of `text` or `error`")
        if not isinstance(r.get("when", []), list):
            raise ValueError(f"{path}: reply {i}: `when` must be a list of strings")
    return raw["replies"], raw.get("default")


class ScriptedServer:
    """Serves a script on 127.0.0.1 (an ephemeral port); `url` is its base URL. Every request is
    recorded in `requests` (path, headers, body, which reply, the usage reported)."""

    def __init__(self, replies: list[dict] | None = None, default: dict | None = None, port: int = 0):
        self.script: list[tuple[int, dict, dict]] = []
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._seen_systems: set[str] = set()
        self.load(replies or [], default)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    body = None
                status, out, headers = outer._answer(self.path, dict(self.headers), body)
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def load(self, replies: list[dict], default: dict | None = None) -> None:
        """Serve these replies from now on (the cache of system prompts seen is kept)."""
        with self._lock:
            self.replies, self.default = list(replies), default
            self.used = [False] * len(self.replies)

    def unused(self) -> list[int]:
        return [i for i, u in enumerate(self.used) if not u]

    def _pick(self, prompt: str) -> tuple[int | None, dict | None]:
        for i, r in enumerate(self.replies):
            if not self.used[i] and all(w in prompt for w in r.get("when", [])):
                self.used[i] = True
                return i, r
        return None, self.default

    def _answer(self, path: str, headers: dict, body) -> tuple[int, dict, dict]:
        from klineage.llm import prompt_parts
        api = "anthropic" if path.rstrip("/").endswith("/messages") else \
            "openai" if path.rstrip("/").endswith("/chat/completions") else None
        with self._lock:
            rec = {"path": path, "headers": headers, "body": body, "api": api, "reply": None, "usage": None}
            self.requests.append(rec)
            if self.script:
                return self.script.pop(0)
            if api is None or not isinstance(body, dict):
                return 404, {"type": "error", "error": {"type": "not_found_error", "message": f"no API at {path}"}}, {}
            system, user = prompt_parts(body)
            idx, reply = self._pick(system + "\n" + user)
            rec["reply"] = idx if idx is not None else ("default" if reply else None)
            if reply is None:
                return 500, {"type": "error", "error": {"type": "api_error", "message": "script exhausted: no reply matches"}}, {}
            if "error" in reply:
                return reply.get("status", 500), {"type": "error", "error": {"type": reply["error"], "message": f"{reply['error']} (scripted)"}}, \
                    dict(reply.get("headers") or {})
            text, model = reply["text"], body.get("model", "claude-sonnet-4-5")
            cacheable = api == "anthropic" and isinstance(body.get("system"), list) and \
                any(b.get("cache_control") for b in body["system"] if isinstance(b, dict))
            sys_t, user_t, out_t = tokens(system), tokens(user), tokens(text)
            hit = system in self._seen_systems
            self._seen_systems.add(system)
            if api == "anthropic":
                write, read = (0, sys_t) if (cacheable and hit) else ((sys_t, 0) if cacheable else (0, 0))
                uncached = user_t + (0 if cacheable else sys_t)
                rec["usage"] = {"input_tokens": uncached, "output_tokens": out_t,
                                "cache_creation_input_tokens": write, "cache_read_input_tokens": read}
                return anthropic_reply(text, uncached, out_t, write, read, model)
            cached = sys_t if hit else 0  # an OpenAI-compatible server caches a repeated prefix itself
            rec["usage"] = {"input_tokens": sys_t + user_t - cached, "output_tokens": out_t,
                            "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}
            return openai_reply(text, sys_t + user_t, out_t, cached, model)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------- scripts from a version ladder

def _fenced(kernel: str, lang: str = "cuda") -> str:
    return f"```{lang}\n{kernel.rstrip(chr(10))}\n```"


def _evidence(current: str, simpler: str) -> list[list[int]]:
    """Line ranges of `current` that the edit to `simpler` changes, code before comments: the
    ranges a model would cite as carrying the mechanism."""
    from klineage.lineage.llm_proposer import changed_lines
    lines = current.splitlines()
    changed = sorted(changed_lines(current, simpler))
    code = [n for n in changed if n <= len(lines) and lines[n - 1].strip()
            and not lines[n - 1].strip().startswith("//")]
    ranges: list[list[int]] = []
    for n in code or changed:
        if ranges and n == ranges[-1][1] + 1:
            ranges[-1][1] = n
        else:
            ranges.append([n, n])
    return ranges[:12]


def _present(ladder, i: int, known: set[str]) -> list[str]:
    """Mechanisms present in rung i: what the detectors see, plus the rungs' structural (undetected)
    mechanisms at or below i."""
    from klineage.mechanisms import detect_all
    kinds = {f.mechanism for f in detect_all(ladder[i].source)}
    return sorted(kinds | {v.mechanism for v in ladder[1:i + 1] if v.mechanism and v.mechanism not in known})


def broken(kernel: str) -> str:
    """The kernel with a compile error (a failing static_assert after its includes)."""
    lines = kernel.splitlines()
    at = max((i for i, ln in enumerate(lines) if ln.startswith("#include")), default=-1) + 1
    return "\n".join(lines[:at] + ['static_assert(sizeof(float) == 0, "scripted compile error");'] + lines[at:]) + "\n"


def host_synced(kernel: str) -> str:
    """The kernel with a host synchronisation after its first launch (the gate's guard rejects it)."""
    lines = kernel.splitlines()
    at = next(i for i, ln in enumerate(lines) if "<<<" in ln) + 1
    return "\n".join(lines[:at] + ["    cudaDeviceSynchronize();"] + lines[at:]) + "\n"


def _label(rich, simple, known: set[str]) -> str:
    """What the walk records a rung's step as: the evidence's label (klineage.mechanisms.audit), which
    names, with the rung's mechanism, the forms no rule takes off that the rung also added."""
    from klineage.mechanisms import detect_all
    from klineage.mechanisms.audit import audit_ladder_step
    audit, mechs = audit_ladder_step(detect_all(rich.source), detect_all(simple.source), rich.mechanisms, known)
    return "+".join(mechs) if audit["ok"] else rich.mechanism


def mine_script(workload_dir: Path, rederived=None) -> dict:
    """The answers of a backward llm walk of the workload's ladder, expert.cu down to naive.cu: at
    each rung the step removing the mechanism that rung added (the next rung down as the simpler
    kernel, the changed lines of the rung as evidence), its forward re-derivation (the rung itself,
    or `rederived(rung, next rung down)`: the kernel a model writes back from the simpler one, given
    the two ladder versions), and `done` at naive.cu. Four wrong answers are mixed in, one at each of the first rungs that
    exist: malformed JSON (rejected when parsed), a step removing two mechanisms (rejected by the
    audit), citations of lines that do not exist (rejected by the citation check) and a simpler
    kernel that does not compile (rejected by the gate). Each answer is keyed by its rung's numbered
    source in the prompt. Returns {"replies": [...], "default": ..., "expect": {...}}."""
    from klineage.lineage.llm_proposer import format_proposal, numbered
    from klineage.lineage.proposers import ladder_from_folder
    from klineage.mechanisms import registry

    known = {m.NAME for m in registry().values() if m.DETECTABLE}
    ladder = ladder_from_folder(Path(workload_dir))
    top = len(ladder) - 1
    replies: list[dict] = []
    steps = []
    for i in range(top, 0, -1):
        rich, simple, mech = ladder[i], ladder[i - 1], ladder[i].mechanism
        key = [numbered(rich.source) + "\n```"]
        before, after = _present(ladder, i, known), _present(ladder, i - 1, known)
        locus = f"{rich.label}: the code that {mech} touches"
        good = {"mechanism": mech, "locus": locus,
                "backward_edit": f"removed {mech}, leaving the rest of {rich.label} as it was ({simple.label})",
                "features_before": before, "features_after": after,
                "evidence_lines": _evidence(rich.source, simple.source), "kernel": simple.source}
        wrong = top - i  # which wrong answer this rung gets, if any
        if wrong == 0:
            replies.append({"when": key, "note": "malformed", "text": "Here is the step.\n\n```json\n{\"mechanism\": \""
                            + mech + "\", \"locus\": \n```\n"})
        elif wrong == 1 and i >= 2:
            two = dict(good, locus=f"{rich.label}: {mech} and what it rests on", kernel=ladder[i - 2].source,
                       backward_edit=f"removed {mech} (and, silently, {ladder[i - 1].mechanism})")
            replies.append({"when": key, "note": "two_mechanisms", "text": format_proposal(two)})
        elif wrong == 2:
            n = len(rich.source.splitlines())
            replies.append({"when": key, "note": "bad_citation",
                            "text": format_proposal(dict(good, locus=f"{rich.label}: lines past the end",
                                                         evidence_lines=[[n + 10, n + 20]]))})
        elif wrong == 3:
            replies.append({"when": key, "note": "compile_error",
                            "text": format_proposal(dict(good, locus=f"{rich.label}: {mech}, first try",
                                                         kernel=broken(simple.source)))})
        replies.append({"when": key, "note": "step", "text": format_proposal(good, "Removing one mechanism.")})
        replies.append({"when": [f'Re-apply the optimization "{mech}" at {locus}'], "note": "rederive",
                        "text": "The optimized kernel:\n\n" + _fenced(rederived(rich, simple) if rederived else rich.source)
                        + "\n"})
        steps.append(_label(rich, simple, known))
    done = {"when": [numbered(ladder[0].source) + "\n```"], "note": "done",
            "text": "```json\n" + json.dumps({"done": True, "reason": "a plain one-thread-per-element kernel: "
                                              "no optimization mechanism is left"}) + "\n```\n"}
    replies.append(done)
    return {"replies": replies, "default": {"text": "I have no further proposal.", "note": "default"},
            "expect": {"mechanisms": steps, "naive": ladder[0].source, "expert": ladder[-1].source}}


def baseline_script(workload_dir: Path, method: str, rungs: list[int | str], tag: bool = True) -> dict:
    """The answers of a baseline run from naive.cu: `rungs` lists, in order, the ladder rung each
    call returns (an index into naive, versions..., expert) or a wrong answer: "malformed" (no
    code block), "compile:N" (rung N that does not compile) or "guard:N" (rung N synchronising with
    the host). With `tag`, each kernel ends in a comment naming the method and the call, so each
    method's kernels are new to the gate and measured for it."""
    from klineage.lineage.proposers import ladder_from_folder
    ladder = ladder_from_folder(Path(workload_dir))
    replies = []
    for call, r in enumerate(rungs, start=1):
        if r == "malformed":
            replies.append({"note": "malformed", "text": "I would unroll the loop and vectorize the loads."})
            continue
        kind, _, n = str(r).partition(":") if isinstance(r, str) else ("rung", "", r)
        src = ladder[int(n)].source
        if tag:
            src = src.rstrip("\n") + f"\n// baseline {method}, answer {call}\n"
        src = broken(src) if kind == "compile" else host_synced(src) if kind == "guard" else src
        note = kind if kind != "rung" else ladder[int(n)].label
        replies.append({"note": note, "text": f"Here is a faster version.\n\n{_fenced(src)}\n"})
    return {"replies": replies, "default": {"text": "No further idea.", "note": "default"}}


def main(argv: list[str] | None = None) -> int:
    import argparse
    import time
    ap = argparse.ArgumentParser(description="Serve a script file as an Anthropic / OpenAI-compatible model on loopback.")
    ap.add_argument("script", type=Path)
    ap.add_argument("--port", type=int, default=0)
    ns = ap.parse_args(argv)
    replies, default = load_script(ns.script)
    server = ScriptedServer(replies, default, port=ns.port)
    print(f"serving {len(replies)} replies at {server.url} (Anthropic: ANTHROPIC_BASE_URL={server.url}; "
          f"OpenAI-compatible: --base-url {server.url}/v1); Ctrl-C stops", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
