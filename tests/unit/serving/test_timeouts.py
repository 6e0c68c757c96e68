"""Timeouts: every block of a layer timed by one timer, each behaving as under asyncio.timeout."""

from __future__ import annotations

import asyncio

import pytest

from mlpipe.serving._timeouts import Timeouts


async def _block(timeouts: Timeouts, work: float) -> str:
    try:
        async with timeouts() as timeout:
            await asyncio.sleep(work)
    except TimeoutError:
        assert timeout.expired()
        return "timed out"
    assert not timeout.expired()
    return "done"


def test_a_block_over_its_time_raises_timeout_error_and_one_within_it_does_not() -> None:
    timeouts = Timeouts(0.05)

    async def both() -> list[str]:
        return list(await asyncio.gather(_block(timeouts, 1.0), _block(timeouts, 0.001)))

    assert asyncio.run(both()) == ["timed out", "done"]
    assert timeouts._due == {}  # nothing left behind


def test_each_block_gets_its_own_time_from_when_it_began() -> None:
    """The second block starts later, so it is still running when the first times out."""
    timeouts = Timeouts(0.1)

    async def staggered() -> list[str]:
        first = asyncio.create_task(_block(timeouts, 1.0))
        await asyncio.sleep(0.06)
        second = asyncio.create_task(_block(timeouts, 0.08))  # ends at 0.14 s, due at 0.16 s
        return [await first, await second]

    loop = asyncio.new_event_loop()
    try:
        began = loop.time()
        assert loop.run_until_complete(staggered()) == ["timed out", "done"]
        assert 0.13 <= loop.time() - began < 1.0
    finally:
        loop.close()


def test_blocks_that_end_early_do_not_keep_a_later_one_from_timing_out() -> None:
    timeouts = Timeouts(0.05)

    async def mixed() -> list[str]:
        quick = [_block(timeouts, 0.001) for _ in range(20)]
        return list(await asyncio.gather(*quick, _block(timeouts, 1.0)))

    results = asyncio.run(mixed())
    assert results == ["done"] * 20 + ["timed out"]


def test_a_disarmed_block_runs_to_its_end() -> None:
    timeouts = Timeouts(0.02)

    async def disarmed() -> bool:
        async with timeouts() as timeout:
            timeouts.disarm(timeout)
            await asyncio.sleep(0.06)
        return timeout.expired()

    assert asyncio.run(disarmed()) is False


def test_a_timeout_error_of_the_blocks_own_is_not_an_expiry() -> None:
    timeouts, seen = Timeouts(5.0), list[asyncio.Timeout]()

    async def own() -> None:
        async with timeouts() as timeout:
            seen.append(timeout)
            raise TimeoutError("the block's own")

    with pytest.raises(TimeoutError, match="the block's own"):
        asyncio.run(own())
    assert not seen[0].expired()


def test_a_cancelled_block_is_cancelled_not_timed_out() -> None:
    timeouts = Timeouts(5.0)

    async def cancelled() -> None:
        task = asyncio.create_task(_block(timeouts, 1.0))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    assert timeouts._due == {}


def test_the_same_timeouts_serve_a_second_event_loop() -> None:
    """Tests and restarts run layers on a fresh loop: the old loop's timer is not relied on."""
    timeouts = Timeouts(0.03)
    assert asyncio.run(_block(timeouts, 1.0)) == "timed out"
    assert asyncio.run(_block(timeouts, 1.0)) == "timed out"
    assert asyncio.run(_block(timeouts, 0.001)) == "done"
