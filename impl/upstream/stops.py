"""Each finish kind (`FINISH_BY`) armed on upstream's own `Req`, so that upstream's own check finds it.

A finishing step names the output token its check must stop at. Arming sets what that kind reads, and only for
the step: a stop token of the sampling params (`stop_token_ids`), an EOS id of the request (`eos_token_ids`),
the length cap (`max_new_tokens`, set to the output length through the stop), or a stop string, which a
tokenizer stand-in decodes from that token alone. Upstream's `Req.update_finish_state` then decides whether,
and where, the request finished (`finished_reason`, `finished_len`); nothing here sets either.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from properties.vocabulary import FINISH_BY

STOP_TEXT = "<|stop|>"
# What the stand-in decodes every other token to: no run of them spells the stop string.
OTHER_TEXT = "."


class StopStringTokenizer:
    """The tokenizer stand-in for a stop string: `stop_id` decodes to `STOP_TEXT`, every other id to `OTHER_TEXT`;
    it names no EOS and no extra stop ids, so only the stop string can match through it."""

    eos_token_id = None
    additional_stop_token_ids = None

    def __init__(self, stop_id: int) -> None:
        self.stop_id = stop_id

    def decode(self, ids: Any, **_: Any) -> str:
        return "".join(STOP_TEXT if int(i) == self.stop_id else OTHER_TEXT for i in ids)


@contextlib.contextmanager
def armed(req: Any, by: int, stop_id: int, stop_output_len: int) -> Iterator[None]:
    """For the step inside: `req`'s check stops at the output token `stop_id`, the `stop_output_len`-th output,
    by the kind `FINISH_BY[by]`; every field armed is put back afterwards."""
    params = req.sampling_params
    saved = (
        params.stop_token_ids,
        params.max_new_tokens,
        list(params.stop_strs),
        params.stop_str_max_len,
        req.eos_token_ids,
        req.tokenizer,
    )
    kind = FINISH_BY[by]
    if kind == "stop_token":
        params.stop_token_ids = {stop_id}
    elif kind == "eos":
        req.eos_token_ids = {stop_id}
    elif kind == "length":
        params.max_new_tokens = stop_output_len
    else:
        params.stop_strs, params.stop_str_max_len = [STOP_TEXT], len(STOP_TEXT)
        req.tokenizer = StopStringTokenizer(stop_id)
    try:
        yield
    finally:
        (
            params.stop_token_ids,
            params.max_new_tokens,
            params.stop_strs,
            params.stop_str_max_len,
            req.eos_token_ids,
            req.tokenizer,
        ) = saved
