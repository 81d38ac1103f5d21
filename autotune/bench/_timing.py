"""What one replayed request measured (client side)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RequestTiming"]


@dataclass(frozen=True)
class RequestTiming:
    """Times are seconds. ``scheduled`` and ``sent`` are offsets from the start of the run."""

    request_id: str
    session: str | None
    scheduled: float
    sent: float
    ttft: float | None  # first streamed chunk with choices minus send time
    latency: float | None  # last chunk minus send time
    itl: tuple[float, ...]  # gaps between chunks
    output_tokens: int
    prompt_tokens: int | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.ttft is not None

    @property
    def lag(self) -> float:
        return self.sent - self.scheduled

    @property
    def tpot(self) -> float | None:
        if not self.ok or self.latency is None or self.ttft is None or self.output_tokens <= 1:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)
