"""The blocking (Sync) clients over a whole program's life, as scripts use them.

Goal: a script that sends and exits without close() still delivers what it sent
(and a consumer's acks still go out); Ctrl-C in receive() raises
KeyboardInterrupt and the receive it interrupted takes no event; a closed
client, a client used after os.fork() and wrong arguments give errors that say
what was wrong, never `Event loop is closed`, a traceback on the loop thread or
a wait without end.
Method: a real broker process; each user program runs as its own Python
process (exit, signals and fork are the subject), whose output the test reads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sdk import (
    KeybusError,
    Message,
    ProducerClosed,
    SyncAdmin,
    SyncConsumer,
    SyncProducer,
    SyncTopicReader,
)
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.interrupt import SIGINT_DEFAULT


def _script(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(SIGINT_DEFAULT + textwrap.dedent(body))  # some tests Ctrl-C it
    return [sys.executable, str(path)]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _run(command: list[str], timeout_s: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=_env())


def _topic(address: str, name: str, partitions: int = 1) -> None:
    with SyncAdmin(address) as admin:
        admin.create_topic(name, partitions)


def test_a_script_exiting_without_close_delivers_its_events(
        shared_broker: BrokerProcess, tmp_path: Path) -> None:
    address = shared_broker.address
    _topic(address, "life-exit", 2)
    produced = _run(_script(tmp_path, "produce", f"""
        import threading
        from keybus import SyncProducer
        producer = SyncProducer.create({address!r}, "life-exit")
        for key in range(200):
            producer.send(key, b"v")
        other = SyncProducer.create({address!r}, "life-exit")
        def worker():  # a daemon thread still sending as the program ends
            while True:
                other.send(-1, b"daemon").result(30)
        threading.Thread(target=worker, daemon=True).start()
        print("sent")
    """))
    assert produced.returncode == 0, produced.stderr
    assert "Traceback" not in produced.stderr
    assert "was not closed" not in produced.stderr  # the broker answered at once: no warning
    with SyncTopicReader(address, "life-exit") as reader:
        keys = [e.key for b in reader for e in b.events()]
    assert sorted(k for k in keys if k >= 0) == list(range(200))


def test_a_script_exiting_without_close_sends_its_acks(shared_broker: BrokerProcess,
                                                      tmp_path: Path) -> None:
    address = shared_broker.address
    _topic(address, "life-acks", 2)
    with SyncProducer.create(address, "life-acks") as producer:
        for key in range(200):
            producer.send(key, b"v")
    consumed = _run(_script(tmp_path, "consume", f"""
        import threading
        from keybus import SyncConsumer
        consumer = SyncConsumer.subscribe({address!r}, "life-acks", "exit", start="earliest")
        for _ in range(200):
            consumer.ack(consumer.receive(30))
        other = SyncConsumer.subscribe({address!r}, "life-acks", "daemon", start="latest")
        def worker():  # a daemon thread still receiving as the program ends
            for message in other:
                other.ack(message)
        threading.Thread(target=worker, daemon=True).start()
        print("acked")
    """))
    assert consumed.returncode == 0, consumed.stderr
    assert "Traceback" not in consumed.stderr
    with SyncAdmin(address) as admin:
        described = admin.describe_subscription("life-acks", "exit")
    assert sum(p.backlog for p in described.partitions) == 0, described


def test_a_producer_without_its_broker_says_so_and_resumes(broker: BrokerProcess) -> None:
    _topic(broker.address, "life-down")
    with SyncProducer.create(broker.address, "life-down") as producer:
        broker.kill()
        sent = producer.send(1, b"while down")
        with pytest.raises(TimeoutError, match=r"^the event was not answered within "
                                                r"timeout_s=0\.5; it stays pending"):
            sent.result(0.5)
        with pytest.raises(TimeoutError, match=r"^SyncProducer of topic 'life-down': "
                                                r"flush\(\) not done within timeout_s=0\.5$"):
            producer.flush(0.5)
        broker.start()
        producer.flush(60)
        assert sent.result(0).offset == 0


def test_ctrl_c_in_receive_raises_and_takes_no_event(shared_broker: BrokerProcess,
                                                    tmp_path: Path) -> None:
    address = shared_broker.address
    _topic(address, "life-sigint")
    interrupted = _run(_script(tmp_path, "interrupted", f"""
        import os, signal, threading
        from keybus import SyncConsumer, SyncProducer
        consumer = SyncConsumer.subscribe({address!r}, "life-sigint", "s", start="earliest")
        try:  # Ctrl-C a second into a receive that has nothing to take
            threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
            consumer.receive()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        with SyncProducer.create({address!r}, "life-sigint") as producer:
            producer.send(7, b"after").result(30)
        print("received", consumer.receive(30).key, flush=True)
        consumer.close()
    """))
    out, err = interrupted.stdout, interrupted.stderr
    assert out == "interrupted\nreceived 7\n", err


def test_ctrl_c_in_a_following_reader_loses_no_batch(shared_broker: BrokerProcess,
                                                     tmp_path: Path) -> None:
    address = shared_broker.address
    _topic(address, "life-reader")
    interrupted = _run(_script(tmp_path, "reader", f"""
        import os, signal, threading
        from keybus import SyncProducer, SyncReader
        reader = SyncReader({address!r}, "life-reader", 0, start="earliest", follow=True)
        try:
            threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
            next(reader)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        with SyncProducer.create({address!r}, "life-reader") as producer:
            producer.send(7, b"after").result(30)
        give_up = threading.Timer(30.0, os.kill, (os.getpid(), signal.SIGINT))
        give_up.start()
        try:
            print("read", [event.key for event in next(reader).events()], flush=True)
        except KeyboardInterrupt:
            print("nothing read within 30 s", flush=True)
        give_up.cancel()
        reader.close()
    """))
    assert interrupted.stdout == "interrupted\nread [7]\n", interrupted.stderr


def test_a_client_used_after_fork_says_so(shared_broker: BrokerProcess,
                                          tmp_path: Path) -> None:
    address = shared_broker.address
    _topic(address, "life-fork")
    forked = _run(_script(tmp_path, "forked", f"""
        import os
        from keybus import SyncProducer
        producer = SyncProducer.create({address!r}, "life-fork")
        child = os.fork()
        if child == 0:
            for call in (lambda: producer.send(1, b"child"), lambda: producer.flush(10)):
                try:
                    call()
                    print("child: no error", flush=True)
                except RuntimeError as error:
                    print("child:", error, flush=True)
            os._exit(0)
        os.waitpid(child, 0)
        print("parent:", producer.send(2, b"parent").result(30).offset)
        producer.close()
    """))
    assert forked.returncode == 0, forked.stderr
    lines = forked.stdout.splitlines()
    assert lines[-1] == "parent: 0", forked.stdout
    assert len(lines) == 3 and all("made before os.fork()" in line for line in lines[:2]), lines
    assert "send() refused" in lines[0] and "flush() refused" in lines[1]


def test_a_closed_client_says_it_is_closed(shared_broker: BrokerProcess) -> None:
    address = shared_broker.address
    _topic(address, "life-closed")
    producer = SyncProducer.create(address, "life-closed")
    producer.close()
    with pytest.raises(ProducerClosed, match=r"is closed: flush\(\) after close\(\)"):
        producer.flush()
    consumer = SyncConsumer.subscribe(address, "life-closed", "s")
    message = Message.__new__(Message)  # a well-typed ack of a closed consumer
    consumer.close()
    with pytest.raises(KeybusError, match=r"'life-closed'/'s' is closed: receive\(\) after"):
        consumer.receive(1)
    with pytest.raises(KeybusError, match=r"is closed: ack\(\) after close\(\)"):
        consumer.ack(message)
    admin = SyncAdmin(address)
    admin.close()
    with pytest.raises(KeybusError, match=r"is closed: list_topics\(\) after close\(\)"):
        admin.list_topics()


def test_wrong_arguments_are_refused_in_the_callers_thread(
        shared_broker: BrokerProcess, capfd: pytest.CaptureFixture[str]) -> None:
    address = shared_broker.address
    _topic(address, "life-args")
    with SyncProducer.create(address, "life-args") as producer:
        producer.send(1, b"v")
        with pytest.raises(ValueError, match=r"timeout_s='5' is invalid: give seconds"):
            producer.flush("5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unknown producer setting\(s\) colour; allowed: "
                                         r"linger_ms, .*, producer_id, security$"):
        SyncProducer.create(address, "life-args", colour="red")
    with pytest.raises(ValueError, match=r"subscription 5 is invalid: give a name \(a str"):
        SyncConsumer.subscribe(address, "life-args", 5)  # type: ignore[arg-type]
    with SyncConsumer.subscribe(address, "life-args", "s", start="earliest") as consumer:
        with pytest.raises(TypeError, match=r"ack\(\) takes a Message \(as receive\(\) "
                                            r"returns\); got NoneType None"):
            consumer.ack(None)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"nack\(\) takes a Message or ReceivedBatch"):
            consumer.nack("x")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"partition='p' is invalid; use one of this "
                                             r"consumer's partitions \[0\]"):
            consumer.ack_offsets("p", [0])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"offset -1 is invalid; offsets are ints 0\.\."):
            consumer.ack_offsets(0, [-1])
        with pytest.raises(ValueError, match=r"timeout_s=-1 is invalid"):
            consumer.receive(-1)
        message = consumer.receive(30)
        consumer.ack(message)
        consumer.flush_acks()  # the refused calls left nothing behind to fail it
    assert "Exception in callback" not in capfd.readouterr().err


def test_a_receive_timeout_says_what_timed_out(shared_broker: BrokerProcess) -> None:
    address = shared_broker.address
    _topic(address, "life-timeout")
    with SyncConsumer.subscribe(address, "life-timeout", "s", start="latest") as consumer:
        with pytest.raises(TimeoutError, match=r"'life-timeout'/'s': no event within "
                                               r"timeout_s=0\.2$"):
            consumer.receive(0.2)
        with pytest.raises(TimeoutError, match=r"no event within timeout_s=0\.2$"):
            consumer.receive_batch(0.2)
