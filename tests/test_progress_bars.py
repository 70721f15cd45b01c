"""A materialization's progress bar, as Feast builds it, ends with one line showing the final
keys and parts, however the counts arrived."""

from __future__ import annotations

import io
import re
import time

from tqdm import tqdm

from feast_stream_backfill.feast_plugin.online_writer import Progress, Tally


def drawn(during, at_end) -> list[str]:
    """The lines a bar drew (each ``\\r`` or newline starts one) while ``during`` ran inside
    it, more than one poll long, and ``at_end`` ran just before it closed."""
    out = io.StringIO()
    written, parts = Tally(), Tally()
    with Progress("spend", written, parts, lambda total: tqdm(total=total, ncols=100, file=out)):
        during(written, parts)
        time.sleep(0.8)
        at_end(written, parts)
    return [line for line in re.split(r"[\r\n]", out.getvalue()) if line.strip()]


def test_a_bar_whose_counts_arrive_at_the_end_draws_its_last_line_once():
    lines = drawn(lambda w, p: None, lambda w, p: (w.add(5), p.add(1)))
    finals = [line for line in lines if "1 partitions done" in line]
    assert len(finals) == 1 and finals[0] == lines[-1]
    assert lines[-1].startswith("spend: 5 keys")


def test_a_part_finishing_after_its_keys_were_shown_reaches_the_last_line():
    lines = drawn(lambda w, p: w.add(5), lambda w, p: p.add(1))
    assert "spend: 5 keys" in lines[-1] and "1 partitions done" in lines[-1]
    assert sum("1 partitions done" in line for line in lines) == 1
