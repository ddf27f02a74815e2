"""The metrics service's replies as people read them: a failed call as one line (exit 2 where the
user's input was wrong), a comparison as a table.  ``showtell metrics`` and ``showtell runs`` both
print them."""

from __future__ import annotations

import grpc

from showtell.api.contract import DEFAULT_SET
from showtell.api.transport import ClientSecurity
from showtell.common.errors import ShowtellError, UsageError
from showtell.v1 import metrics_pb2 as pb


def format_comparison(c: pb.CompareResponse) -> str:
    """B against A, a line per metric: both values, B − A with its paired interval, the p-value
    and the verdict (better, worse, or no difference beyond noise)."""
    def name(e: pb.Evaluation) -> str:
        on = f" on {e.eval_set}" if e.eval_set not in ("", DEFAULT_SET) else ""
        return f"step {e.global_step} of run {e.run_id or '-'}{on}"

    level = f"{c.bootstrap.confidence * 100:g} %"
    lines = [f"B {name(c.b)} against A {name(c.a)}: {c.images} images, {c.bootstrap.samples} paired "
             f"resamples, {level} intervals",
             f"  {'metric':<24}{'A':>10}{'B':>10}{'B − A':>10}  {'interval of B − A':<22}{'p':>7}"]
    for m in c.comparisons:
        if m.significant:
            verdict = "B better" if (m.difference > 0) == m.higher_is_better else "B worse"
        else:
            verdict = "no difference beyond noise"
        interval = f"({m.interval.lower:+.4f}–{m.interval.upper:+.4f})"
        lines.append(f"  {m.metric:<24}{m.a:>10.4f}{m.b:>10.4f}{m.difference:>+10.4f}  {interval:<22}"
                     f"{m.p_value:>7.3f}  {verdict}")
    for side, only in (("A", c.only_in_a), ("B", c.only_in_b)):
        if only:
            lines.append(f"  not compared, only {side} has: {', '.join(only)}")
    for metric, why in sorted(c.not_compared.items()):
        lines.append(f"  not compared, {metric}: {why}")
    return "\n".join(lines)


def explain(error: grpc.RpcError, server: str, security: ClientSecurity,
            usage: tuple[grpc.StatusCode, ...] = ()) -> ShowtellError:
    """A failed call as one line: INVALID_ARGUMENT, and the ``usage`` codes (e.g. NOT_FOUND for a
    run id the user typed), exit 2 like a bad flag; the rest 1."""
    code = error.code()
    if code == grpc.StatusCode.INVALID_ARGUMENT or code in usage:
        return UsageError(f"{server}: {error.details()}")
    if code == grpc.StatusCode.UNAVAILABLE:
        hint = ("is it running, and does it serve TLS with a certificate --ca trusts?" if security.tls
                else "is it running? (if it serves TLS, pass --ca)")
        return ShowtellError(f"cannot reach an evaluator at {server} ({error.details()}); {hint}")
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return ShowtellError(f"{server} refused the call: {error.details()}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ShowtellError(f"{server} did not answer in time; raise --timeout or check the server")
    if code == grpc.StatusCode.NOT_FOUND:
        return ShowtellError(f"not found: {error.details()}")
    return ShowtellError(f"{code.name.lower()}: {error.details()}")
