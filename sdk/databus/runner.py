"""The window runner: a registration's whole lifecycle as a pure state machine.

Job: decide, for one registration (a consumer or a group), which callbacks
run next, when a window rolls back and is delivered again, when to
checkpoint and when consumption ends. The shell feeds it inputs (`process_*`)
and carries out the step each returns: a `Segment` of calls (every member
runs them, then they meet: see window.py), a `Persist` of a checkpoint, a
`Sleep` before a retry, `Finished`, or None (wait for the next input).

Rules (Databus's GenericDispatcher and MultiConsumerCallback, as the issue
sets them):
1. Windows are delivered one at a time, whole or in pieces (a streamed
   window). Nothing of a later window is delivered before the current one
   succeeds.
2. ERROR (or an exception, or a call over its time budget) in any call of
   the window, its on_checkpoint included, rolls it back: after a backoff,
   on_rollback(start scn) to every member, then the window again from its
   first event. After `window_retries_max` retries: on_error, then stop.
3. FATAL anywhere stops at once: only on_stop_consumption follows, and no
   checkpoint is written. ERROR in on_start_consumption counts as FATAL, as
   does FATAL from on_rollback; other results of on_rollback, and those of
   on_error and on_stop_consumption, are ignored.
4. Checkpoints cover whole windows only. After a window ends, the policy
   (every N windows, every T ms) or a CHECKPOINT result asks for one, a
   SKIP_CHECKPOINT result vetoes it; then on_checkpoint(scn) runs before the
   store is written (as in Databus, so SKIP_CHECKPOINT or ERROR there keeps
   it from being written). A failed write is reported with on_error; the
   windows stay pending and the next checkpoint covers them.
5. A window none of whose events is for this registration gets no
   callbacks, but counts as done (a later checkpoint covers it).
6. A transport restart of an open streamed window (`process_abort`) calls
   on_rollback and waits for the window again; it is not a retry.
7. A clean stop checkpoints every pending partition (through
   on_checkpoint), then calls on_stop_consumption. So does a stop after
   exhausted retries or a failed read, after on_error.
8. Bootstrap (bootstrap_callbacks.py): a marker input (`process_marker`)
   calls on_start_bootstrap or on_end_bootstrap between windows; a failure
   there is FATAL, as in on_start_consumption. A bootstrap piece is a
   window presented with the bootstrap callbacks; its checkpoint calls
   on_bootstrap_checkpoint and carries the piece's position (opaque here),
   its rollback calls on_bootstrap_rollback.
9. A position the log read passed (`process_passed`: the broker dropped every
   event of the windows up to it for the registration's filter, Databus's
   end-of-period event) counts as such windows done (rule 5) and may be
   checkpointed as one, but only between windows: an open streamed window
   ends normally first. Positions come in log order with the windows; one
   at or below the partition's pending window is stale and changes nothing.

Its phases, their transition table and the steps it answers are in
`runner_table.py`. It must not know about asyncio, gRPC, the store, the
clock (time is the `now_ms` argument) or how a call is made.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from sdk.databus.config import DatabusConfig
from sdk.databus.errors import ConsumerFatal, WindowRetriesExhausted, WindowTooLarge
from sdk.databus.results import CHECKPOINT, FATAL, SKIP_CHECKPOINT, SUCCESS, CallbackResult, merge
from sdk.databus.runner_table import (
    TRANSITIONS,
    Finished,
    Persist,
    Phase,
    RunnerStateError,
    Sleep,
    Step,
)
from sdk.databus.window import (
    Call,
    EventsCall,
    Scn,
    Segment,
    WindowPiece,
    owner_table,
    plan_piece,
)


class WindowRunner:
    """The state machine of one registration (see the module docstring)."""

    def __init__(self, config: DatabusConfig, members_n: int,
                 sources: Sequence[str] | None = None) -> None:
        self.config = config
        self.members_n = members_n
        self.order = tuple(sources) if sources is not None else None
        self._owners = owner_table(members_n)
        self.phase = Phase.NEW
        self._pieces: list[WindowPiece] = []
        self._closed = False
        self._window_bytes = 0
        self._plan: deque[Segment] = deque()
        self._attempt = SUCCESS
        self._retries = 0
        self._aborting = False
        # Checkpoints: partition -> (offset, scn) of its last done window not yet stored.
        self.pending: dict[int, tuple[int, int]] = {}
        self.positions: dict[int, object] = {}  # partition -> bootstrap position of `pending`
        self._windows_since: dict[int, int] = {}
        self._checkpoint_ms: dict[int, int] = {}
        self._start_ms = 0
        self._target: Persist | None = None
        self._target_ends_window = False
        self._undo: tuple[tuple[int, int] | None, int, object] = (None, 0, None)
        self._stopping = False
        self._flush_left: list[int] = []
        self._resume = Phase.WAITING
        self._error: Exception | None = None
        self._announcing = ""

    @property
    def error(self) -> Exception | None:
        """The error that ends consumption, from the moment on_error is asked to
        report it (None: nothing ends it, or a clean stop)."""
        return self._error

    # ------------------------------------------------------------ table

    def _move(self, event: str, to: Phase) -> None:
        allowed = TRANSITIONS.get((self.phase, event), frozenset())
        if to not in allowed:
            raise RunnerStateError(f"{event} in phase {self.phase.value} cannot lead to "
                                   f"{to.value}; allowed: {sorted(p.value for p in allowed)}")
        self.phase = to

    def _check(self, event: str) -> None:
        if (self.phase, event) not in TRANSITIONS:
            raise RunnerStateError(f"{event} is not allowed in phase {self.phase.value}")

    # ------------------------------------------------------------ inputs

    def start(self, now_ms: int) -> Step:
        """Begin: on_start_consumption to every member."""
        self._move("start", Phase.STARTING)
        self._start_ms = now_ms
        return Segment((Call("on_start_consumption"),))

    def process_piece(self, piece: WindowPiece, closes: bool, now_ms: int) -> Step | None:
        """A window arrives (closes=True: all of it, or its last piece)."""
        self._check("piece")
        opens = self.phase is Phase.WAITING
        if opens:
            self._reset_window()
        else:
            window = self._pieces[0]
            assert (piece.partition, piece.scn) == (window.partition, window.scn), \
                "a piece of another window arrived while one is open"
        self._pieces.append(piece)
        self._window_bytes += piece.size_bytes
        self._closed = closes
        if self._window_bytes > self.config.window_bytes_max:
            error = WindowTooLarge(piece.partition, piece.scn, self._window_bytes,
                                   self.config.window_bytes_max)
            return self._report(error, "piece", stop=True)
        segments = plan_piece(piece, opens, closes, self.order, self._owners, self.members_n)
        if opens and closes and not _has_events(segments):
            segments = []  # rule 5
        self._plan.extend(segments)
        return self._next_segment("piece", now_ms)

    def process_result(self, result: CallbackResult, now_ms: int) -> Step | None:
        """The merged result of the last Segment (every member's calls)."""
        self._check("result")
        phase = self.phase
        if phase is Phase.RUNNING:
            return self._after_window_segment(result, now_ms)
        if phase is Phase.CHECKPOINTING:
            return self._after_checkpoint_call(result, now_ms)
        if phase is Phase.STARTING:
            if result.is_failure:
                return self._stop_fatal("on_start_consumption")
            self._move("result", Phase.WAITING)
            return None
        if phase is Phase.ROLLING_BACK:
            return self._after_rollback(result, now_ms)
        if phase is Phase.ANNOUNCING:
            if result.is_failure:
                return self._stop_fatal(self._announcing)
            self._move("result", Phase.WAITING)
            return None
        if phase is Phase.REPORTING:
            return self._after_report(now_ms)
        self._move("result", Phase.STOPPED)
        return Finished(self._error)

    def process_persisted(self, error: Exception | None, now_ms: int) -> Step | None:
        """The shell wrote the checkpoint of the last Persist (error: it could not)."""
        self._check("persisted")
        target = self._target
        assert target is not None
        self._target = None
        if error is not None:
            return self._report(error, "persisted", stop=False)
        if self.pending.get(target.partition) == (target.offset, target.scn):
            del self.pending[target.partition]
        self._windows_since[target.partition] = 0
        self._checkpoint_ms[target.partition] = now_ms
        return self._continue("persisted", now_ms)

    def process_slept(self, now_ms: int) -> Step:
        """The backoff before a retry is over: roll back."""
        self._move("slept", Phase.ROLLING_BACK)
        return Segment((Call(self._rollback_name(), (self._window_scn(),)),))

    def process_marker(self, name: str, now_ms: int) -> Step:
        """A partition starts or ends bootstrapping, between windows (rule 8)."""
        assert name in ("on_start_bootstrap", "on_end_bootstrap"), name
        self._move("marker", Phase.ANNOUNCING)
        self._announcing = name
        return Segment((Call(name),))

    def process_passed(self, partition: int, offset: int, scn: int,
                       now_ms: int) -> Step | None:
        """The read passed windows of `partition` with nothing for this registration,
        up to the one at `scn` ending at `offset` (rule 9): done, as if delivered empty."""
        self._check("passed")
        pending = self.pending.get(partition)
        if self.phase is Phase.OPEN or (pending is not None and pending[0] >= offset):
            self._move("passed", self.phase)  # mid-window, or stale: a later one covers it
            return None
        since = self._windows_since.get(partition, 0) + 1
        self.pending[partition] = (offset, scn)
        self.positions[partition] = None  # a log read's: online
        self._windows_since[partition] = since
        elapsed = now_ms - self._checkpoint_ms.get(partition, self._start_ms)
        if self.config.checkpoint_due(since, elapsed):
            return self._checkpoint(self._persist_of(partition, offset, scn), False, "passed")
        self._move("passed", Phase.WAITING)
        return None

    def process_tick(self, now_ms: int) -> Step | None:
        """Time passed with no window: checkpoint a pending partition the policy says is due."""
        self._check("tick")
        for partition, (offset, scn) in sorted(self.pending.items()):
            elapsed = now_ms - self._checkpoint_ms.get(partition, self._start_ms)
            if 0 < self.config.checkpoint_interval_ms <= elapsed:
                return self._checkpoint(self._persist_of(partition, offset, scn), False, "tick")
        self._move("tick", Phase.WAITING)
        return None

    def process_abort(self, now_ms: int) -> Step:
        """The transport restarted the open streamed window: roll it back (rule 6)."""
        self._move("abort", Phase.ROLLING_BACK)
        self._aborting = True
        return Segment((Call(self._rollback_name(), (self._window_scn(),)),))

    def process_report(self, error: Exception) -> Step:
        """Tell every member about an error that does not stop consumption."""
        return self._report(error, "report", stop=False)

    def process_fail(self, error: Exception) -> Step:
        """An error that ends consumption (e.g. the topic is gone): on_error, then stop."""
        return self._report(error, "report", stop=True)

    def process_stop(self, now_ms: int) -> Step:
        """A clean stop (rule 7). An open streamed window is abandoned unfinished."""
        if self.phase is Phase.NEW:
            self._move("stop", Phase.STOPPED)
            return Finished(None)
        self._check("stop")
        self._stopping = True
        self._flush_left = sorted(self.pending)
        return self._flush_next("stop")

    # ------------------------------------------------------------ windows

    def _reset_window(self) -> None:
        self._pieces = []
        self._closed = False
        self._window_bytes = 0
        self._plan.clear()
        self._attempt = SUCCESS
        self._retries = 0

    def _window_scn(self) -> Scn:
        first = self._pieces[0]
        return Scn(first.scn, first.partition)

    def _rollback_name(self) -> str:
        return "on_bootstrap_rollback" if self._pieces[0].bootstrap else "on_rollback"

    def _persist_of(self, partition: int, offset: int, scn: int) -> Persist:
        return Persist(partition, offset, scn, self.positions.get(partition))

    def _next_segment(self, event: str, now_ms: int) -> Step | None:
        if self._plan:
            self._move(event, Phase.RUNNING)
            return self._plan.popleft()
        if not self._closed:
            self._move(event, Phase.OPEN)
            return None
        return self._window_done(event, now_ms)

    def _after_window_segment(self, result: CallbackResult, now_ms: int) -> Step | None:
        if result is FATAL:
            return self._stop_fatal("a window callback")
        if result.is_failure:
            return self._fail_window("result")
        self._attempt = merge(self._attempt, result)
        return self._next_segment("result", now_ms)

    def _window_done(self, event: str, now_ms: int) -> Step | None:
        """Rule 4: the window ended; record it and decide on a checkpoint."""
        last = self._pieces[-1]
        partition = last.partition
        self._undo = (self.pending.get(partition), self._windows_since.get(partition, 0),
                      self.positions.get(partition))
        self.pending[partition] = (last.offset_last, last.scn)
        self.positions[partition] = last.position
        since = self._undo[1] + 1
        self._windows_since[partition] = since
        elapsed = now_ms - self._checkpoint_ms.get(partition, self._start_ms)
        attempt = self._attempt
        due = attempt is CHECKPOINT or (attempt is not SKIP_CHECKPOINT
                                        and self.config.checkpoint_due(since, elapsed))
        if due:
            return self._checkpoint(self._persist_of(partition, last.offset_last, last.scn),
                                    True, event)
        self._reset_window()
        self._move(event, Phase.WAITING)
        return None

    def _fail_window(self, event: str) -> Step:
        """Rule 2: back off and roll back, or give up."""
        self._retries += 1
        if self._retries > self.config.window_retries_max:
            first = self._pieces[0]
            error = WindowRetriesExhausted(first.partition, first.scn,
                                           self.config.window_retries_max)
            self._reset_window()
            return self._report(error, event, stop=True)
        self._move(event, Phase.BACKING_OFF)
        return Sleep(self.config.backoff_ms(self._retries))

    def _after_rollback(self, result: CallbackResult, now_ms: int) -> Step | None:
        if result is FATAL:
            return self._stop_fatal("on_rollback")
        if self._aborting:
            self._aborting = False
            self._reset_window()
            self._move("result", Phase.WAITING)
            return None
        self._plan.clear()
        self._attempt = SUCCESS
        last = len(self._pieces) - 1
        for i, piece in enumerate(self._pieces):
            self._plan.extend(plan_piece(piece, i == 0, self._closed and i == last, self.order,
                                         self._owners, self.members_n))
        return self._next_segment("result", now_ms)

    # ------------------------------------------------------------ checkpoints

    def _checkpoint(self, target: Persist, ends_window: bool, event: str) -> Step:
        self._move(event, Phase.CHECKPOINTING)
        self._target = target
        self._target_ends_window = ends_window
        name = "on_checkpoint" if target.position is None else "on_bootstrap_checkpoint"
        return Segment((Call(name, (Scn(target.scn, target.partition),)),))

    def _after_checkpoint_call(self, result: CallbackResult, now_ms: int) -> Step | None:
        if result is FATAL:
            return self._stop_fatal("on_checkpoint")
        target = self._target
        assert target is not None
        if result.is_failure and self._target_ends_window:
            self._target = None
            self._undo_window_done(target.partition)
            return self._fail_window("result")
        if result.is_failure or result is SKIP_CHECKPOINT:
            self._target = None
            return self._continue("result", now_ms)
        self._move("result", Phase.PERSISTING)
        return target

    def _undo_window_done(self, partition: int) -> None:
        """The window is retried after all: it is not done (not pending) any more."""
        pending, since, position = self._undo
        if pending is None:
            self.pending.pop(partition, None)
        else:
            self.pending[partition] = pending
        self._windows_since[partition] = since
        self.positions[partition] = position

    def _continue(self, event: str, now_ms: int) -> Step | None:
        """After a checkpoint was written, skipped or failed: flush on, or wait."""
        if self._stopping:
            return self._flush_next(event)
        self._reset_window()
        self._move(event, Phase.WAITING)
        return None

    def _flush_next(self, event: str) -> Step:
        """Rule 7: checkpoint the next pending partition, then stop."""
        while self._flush_left:
            partition = self._flush_left.pop(0)
            if partition in self.pending:
                offset, scn = self.pending[partition]
                return self._checkpoint(self._persist_of(partition, offset, scn), False, event)
        self._move(event, Phase.STOPPING)
        return Segment((Call("on_stop_consumption"),))

    # ------------------------------------------------------------ errors and stops

    def _report(self, error: Exception, event: str, stop: bool) -> Step:
        if stop:
            self._error = error
            self._stopping = True
            self._flush_left = sorted(self.pending)
        self._resume = self.phase if self.phase in (Phase.WAITING, Phase.OPEN) else \
            Phase.WAITING
        self._move(event, Phase.REPORTING)
        return Segment((Call("on_error", (error,)),))

    def _after_report(self, now_ms: int) -> Step | None:
        if self._stopping:
            self._reset_window()
            return self._flush_next("result")
        if self._resume is Phase.OPEN and self._pieces:
            self._move("result", Phase.OPEN)
            return None
        self._reset_window()
        self._move("result", Phase.WAITING)
        return None

    def _stop_fatal(self, callback: str) -> Step:
        scn = self._window_scn() if self._pieces else None
        self._error = ConsumerFatal(callback, scn.partition if scn is not None else None, scn)
        self._move("result", Phase.STOPPING)
        return Segment((Call("on_stop_consumption"),))


def _has_events(segments: Sequence[Segment]) -> bool:
    return any(isinstance(call, EventsCall) for segment in segments for call in segment.calls)
