"""The scheduler: one owner of every task, request lanes, backpressure (STYLE: trio, aiojobs)."""

from __future__ import annotations

import asyncio

import pytest

from tension.core.run import scheduler as scheduler_mod
from tension.core.run.scheduler import LaneStats, Scheduler


async def held(s: Scheduler, lane: str, *call):
    """A request as the engine makes one: a slot of `lane` held while it runs
    (an int first: the slots it takes, a batch's weight)."""
    weight, (fn, *args) = (call[0], call[1:]) if isinstance(call[0], int) else (1, call)
    async with s.slot(lane, weight):
        return await fn(*args)

def run(coro):
    return asyncio.run(coro)


def test_all_is_exported():
    for name in scheduler_mod.__all__:
        assert hasattr(scheduler_mod, name), name


def test_lane_limit_must_be_positive():
    with pytest.raises(ValueError, match="'judge'"):
        Scheduler({"gen": 2, "judge": 0})


# ---------------------------------------------------------------------- lanes


def test_lane_limit_respected_and_reached():
    inflight = 0
    peak_seen = 0

    async def work(i):
        nonlocal inflight, peak_seen
        inflight += 1
        peak_seen = max(peak_seen, inflight)
        await asyncio.sleep(0.02)
        inflight -= 1
        return i * 2

    async def go():
        async with Scheduler({"gen": 3, "judge": 50}) as s:
            tasks = [s.spawn(held(s, "gen", work, i)) for i in range(20)]
        return s, [t.result() for t in tasks]

    s, results = run(go())
    assert results == [i * 2 for i in range(20)]
    st = s.lane_stats["gen"]
    assert isinstance(st, LaneStats)
    assert peak_seen == 3
    assert st.peak_in_flight == 3
    assert st.limit == 3
    assert (st.started, st.finished, st.in_flight) == (20, 20, 0)
    # 20 requests of 20 ms through 3 slots: the later ones waited for a slot
    assert st.queue_seconds > 0.02 * 3
    assert st.busy_seconds >= 20 * 0.02 * 0.9
    judge = s.lane_stats["judge"]
    assert (judge.started, judge.peak_in_flight, judge.queue_seconds) == (0, 0, 0.0)


def test_queue_time_is_apart_from_busy_time():
    async def work():
        await asyncio.sleep(0.1)

    async def go():
        async with Scheduler({"one": 1}) as s:
            s.spawn(held(s, "one", work))
            s.spawn(held(s, "one", work))
        return s.lane_stats["one"]

    st = run(go())
    # the second request queued for the first one's 0.1 s
    assert 0.09 <= st.queue_seconds < 1.0
    assert 0.19 <= st.busy_seconds < 2.0


def test_lane_counts_failed_requests_as_finished():
    async def boom():
        raise KeyError("x")

    async def go():
        async with Scheduler({"gen": 2}) as s:
            with pytest.raises(KeyError):
                await held(s, "gen", boom)
        return s.lane_stats["gen"]

    st = run(go())
    assert (st.started, st.finished, st.in_flight) == (1, 1, 0)


def test_unknown_lane_is_an_error():
    async def go():
        async with Scheduler({"gen": 1}) as s:
            with pytest.raises(KeyError):
                await held(s, "nope", 1, asyncio.sleep, 0)

    run(go())


# ------------------------------------------------------------------ map, feed


def test_map_returns_results_in_order():
    async def work(i):
        await asyncio.sleep(0.001 * (20 - i))  # later items finish first
        return i * i

    async def go():
        async with Scheduler({}) as s:
            return await s.map(work, range(20))

    assert run(go()) == [i * i for i in range(20)]


def test_map_failure_cancels_the_rest_and_surfaces_in_exception_group():
    finished = []

    async def work(i):
        await asyncio.sleep(0.01 * i)
        if i == 2:
            raise ValueError("item 2")
        await asyncio.sleep(5 if i > 2 else 0)
        finished.append(i)
        return i

    async def go():
        async with Scheduler({}) as s:
            return await s.map(work, range(6))

    with pytest.raises(ExceptionGroup) as ei:
        asyncio.run(asyncio.wait_for(go(), timeout=4))
    assert ei.group_contains(ValueError, match="item 2")
    assert finished == [0, 1]


def test_map_of_nothing():
    async def go():
        async with Scheduler({}) as s:
            return await s.map(asyncio.sleep, [])

    assert run(go()) == []


@pytest.mark.parametrize("source", ["sync", "async"])
def test_feed_bounds_open_jobs_and_keeps_start_order(source):
    started: list[int] = []
    open_now = 0
    peak = 0
    pulled: list[tuple[int, int]] = []  # (job pulled from the source, jobs started by then)

    async def job(i, place):
        nonlocal open_now, peak
        assert place == i  # the feed numbers its jobs in order
        started.append(i)
        open_now += 1
        peak = max(peak, open_now)
        await asyncio.sleep(0.003 * ((i * 7) % 5))
        open_now -= 1

    def sync_jobs():
        for i in range(30):
            pulled.append((i, len(started)))
            yield i

    async def async_jobs():
        for i in range(30):
            pulled.append((i, len(started)))
            yield i

    async def go():
        async with Scheduler({}) as s:
            await s.feed(sync_jobs() if source == "sync" else async_jobs(), job, max_open=4)

    run(go())
    assert started == list(range(30))
    assert peak == 4
    # backpressure: job i is not even read from the source before job i-4 has started
    for i, n_started in pulled:
        assert n_started >= i - 4


def test_feed_job_failure_surfaces_in_exception_group():
    async def job(i, _place):
        if i == 2:
            raise ValueError("job 2")
        await asyncio.sleep(0.01)

    async def go():
        async with Scheduler({}) as s:
            await s.feed(range(10), job, max_open=2)

    with pytest.raises(ExceptionGroup) as ei:
        run(go())
    assert ei.group_contains(ValueError, match="job 2")


# ------------------------------------------------------------ failure, cleanup


def test_failing_task_cancels_siblings_and_surfaces_in_exception_group():
    cancelled: list[int] = []
    finished: list[int] = []

    async def sibling(i):
        try:
            await asyncio.sleep(10)
            finished.append(i)
        except asyncio.CancelledError:
            cancelled.append(i)
            raise

    async def failing():
        await asyncio.sleep(0.01)
        raise ValueError("the error")

    async def go():
        async with Scheduler({"gen": 2}) as s:
            for i in range(3):
                s.spawn(sibling(i))
            s.spawn(failing())

    loop_time = []

    async def timed():
        t0 = asyncio.get_running_loop().time()
        try:
            await go()
        finally:
            loop_time.append(asyncio.get_running_loop().time() - t0)

    with pytest.raises(ExceptionGroup) as ei:
        run(timed())
    assert ei.group_contains(ValueError, match="the error")
    assert sorted(cancelled) == [0, 1, 2]
    assert finished == []
    assert loop_time[0] < 5  # siblings did not run to the end


def test_error_in_the_block_cancels_tasks():
    cancelled = []

    async def sibling():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def go():
        async with Scheduler({}) as s:
            s.spawn(sibling())
            await asyncio.sleep(0)
            raise RuntimeError("in the block")

    with pytest.raises(BaseException) as ei:
        run(go())
    err = ei.value
    if isinstance(err, BaseExceptionGroup):
        assert err.subgroup(RuntimeError) is not None
    else:
        assert isinstance(err, RuntimeError)
    assert cancelled == [True]


def test_services_are_cancelled_after_the_work_and_the_block_exits():
    ticks = 0
    two_ticks = None
    service_cancelled = False
    work_done = False

    async def service():
        nonlocal ticks, service_cancelled
        try:
            while True:
                await asyncio.sleep(0.005)
                ticks += 1
                if ticks == 2:
                    two_ticks.set()
        except asyncio.CancelledError:
            service_cancelled = True
            raise

    async def work():
        nonlocal work_done
        await two_ticks.wait()  # the service runs while the work runs
        assert not service_cancelled
        work_done = True

    async def go():
        nonlocal two_ticks
        two_ticks = asyncio.Event()
        async with Scheduler({}) as s:
            svc = s.service(service())
            s.spawn(work())
        return svc

    svc = asyncio.run(asyncio.wait_for(go(), timeout=5))
    assert work_done
    assert ticks >= 2
    assert service_cancelled
    assert svc.cancelled()


def test_service_only_block_exits():
    async def service():
        await asyncio.sleep(10)

    async def go():
        async with Scheduler({}) as s:
            s.service(service())

    asyncio.run(asyncio.wait_for(go(), timeout=2))


def test_leaving_the_block_joins_spawned_work():
    done = []

    async def work(i):
        await asyncio.sleep(0.01 * i)
        done.append(i)

    async def go():
        async with Scheduler({}) as s:
            for i in range(5):
                s.spawn(work(i))
            # tasks spawned by tasks are joined too
            s.spawn(_spawner(s, done))
        return list(done)

    got = run(go())
    assert sorted(got) == [0, 1, 2, 3, 4, 99]


async def _spawner(s, done):
    await asyncio.sleep(0.02)

    async def late():
        await asyncio.sleep(0.05)
        done.append(99)

    s.spawn(late())


def test_spawn_outside_the_block_raises():
    s = Scheduler({"gen": 1})

    async def noop():
        return None

    async def go():
        c1 = noop()
        with pytest.raises(RuntimeError, match="outside"):
            s.spawn(c1)
        c1.close()
        async with s:
            pass
        c2 = noop()
        with pytest.raises(RuntimeError, match="outside"):
            s.spawn(c2)
        c2.close()
        c3 = noop()
        with pytest.raises(RuntimeError, match="outside"):
            s.service(c3)
        c3.close()

    run(go())


# ------------------------------------------------------------ weighted requests


def test_a_weighted_request_holds_its_weight_of_the_lane():
    """A batch of k prompts (core/llm/batch.py) counts as k requests in flight: a lane
    of 10 runs a batch of 6 beside at most 4 single requests, never more."""
    inflight = 0
    peak = 0

    async def work(weight):
        nonlocal inflight, peak
        inflight += weight
        peak = max(peak, inflight)
        await asyncio.sleep(0.01)
        inflight -= weight
        return weight

    async def go():
        async with Scheduler({"judge": 10}) as s:
            tasks = [s.spawn(held(s, "judge", 6, work, 6)) for _ in range(3)]
            tasks += [s.spawn(held(s, "judge", work, 1)) for _ in range(20)]
        return s, [t.result() for t in tasks]

    s, results = run(go())
    assert results == [6] * 3 + [1] * 20
    st = s.lane_stats["judge"]
    assert peak == st.peak_in_flight == 10
    assert (st.started, st.finished, st.in_flight) == (38, 38, 0)


def test_waiters_are_served_in_order_so_a_large_batch_is_not_starved():
    order = []

    async def work(tag):
        order.append(tag)
        await asyncio.sleep(0.01)

    async def go():
        async with Scheduler({"judge": 4}) as s:
            s.spawn(held(s, "judge", 3, work, "first"))
            await asyncio.sleep(0)
            s.spawn(held(s, "judge", 4, work, "big"))  # waits for all 4 slots
            await asyncio.sleep(0)
            for i in range(3):  # would fit beside "first", but "big" asked before them
                s.spawn(held(s, "judge", work, f"small{i}"))

    run(go())
    assert order[:2] == ["first", "big"]


def test_a_weight_above_the_limit_takes_the_whole_lane_and_cancelling_a_waiter_frees_nothing_twice():
    async def go():
        async with Scheduler({"judge": 4}) as s:
            await held(s, "judge", 100, asyncio.sleep, 0)  # clamped: it runs alone
            gate = asyncio.Event()
            holder = s.spawn(held(s, "judge", 4, gate.wait))
            await asyncio.sleep(0)
            waiter = s.spawn(held(s, "judge", 2, asyncio.sleep, 0))
            await asyncio.sleep(0)
            waiter.cancel()
            gate.set()
            await holder
            # every slot is free again: four single requests run at once
            started = []

            async def one(i):
                started.append(i)
                await asyncio.sleep(0.01)

            await asyncio.gather(*(held(s, "judge", one, i) for i in range(4)))
            assert sorted(started) == [0, 1, 2, 3]
        return s

    s = run(go())
    st = s.lane_stats["judge"]
    # the clamped batch held the 4 slots (never more), and carried its 100 requests
    assert (st.in_flight, st.peak_in_flight, st.started, st.finished) == (0, 4, 100 + 4 + 4, 100 + 4 + 4)
