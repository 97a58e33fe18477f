"""`ferrox chat` driven in a pseudo-terminal, as a person uses it: against the running server
(`--url`), a message streams its answer, Ctrl-C stops a long answer and the chat goes on,
`/set` changes a setting, `--verbose` prints the speeds after an answer, a `\"\"\"` block is
one message, `/save` writes the conversation and `/bye` leaves with status 0. Run by
scripts/client-tests.sh (FERROX_URL; the binary from FERROX_BIN or target/debug/ferrox).
"""

import fcntl
import json
import os
import pty
import select
import subprocess
import sys
import tempfile
import termios
import time

ROOT = os.environ.get("FERROX_URL", "http://127.0.0.1:8080/v1").removesuffix("/v1")
BIN = os.environ.get("FERROX_BIN", "target/debug/ferrox")


def controlling():
    """In the child: a session of its own whose controlling terminal is the pty, so that
    Ctrl-C typed there is a SIGINT to it, as in a real terminal."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    def __init__(self, *args):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen([BIN, "chat", "--url", ROOT, *args], stdin=slave,
                                     stdout=slave, stderr=slave, preexec_fn=controlling,
                                     env=dict(os.environ, RUST_LOG="warn"))
        os.close(slave)
        self.seen = ""

    def expect(self, text, timeout=120):
        """Reads until `text` has appeared since the last expect; returns what came."""
        deadline = time.time() + timeout
        while text not in self.seen:
            left = deadline - time.time()
            assert left > 0, f"no {text!r} within {timeout}s; saw {self.seen[-400:]!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096).decode("utf-8", "replace")
                except OSError:
                    break
        at = self.seen.index(text) + len(text)
        got, self.seen = self.seen[:at], self.seen[at:]
        return got

    def send(self, text):
        os.write(self.master, text.encode())


def test_chat_streams_stops_on_ctrl_c_and_keeps_the_conversation():
    t = Terminal("--verbose", "--system", "You are brief.")
    t.expect(">>> ")
    t.send("/set max_tokens 1000\n")
    t.expect("Set max_tokens")
    t.expect(">>> ")
    # Greedy: this answer runs the whole budget (16 s here), so it is still streaming at the
    # Ctrl-C; a sampled one could end at once.
    t.send("/set temperature 0\n")
    t.expect(">>> ")
    t.send("Tell me a very long story about the sea.\n")
    time.sleep(1.5)  # the answer is streaming
    t.send("\x03")  # Ctrl-C: the answer stops, the chat goes on
    stopped = t.expect(">>> ", timeout=30)
    assert "eval rate" not in stopped, stopped
    assert t.proc.poll() is None, "Ctrl-C must not end the chat"
    t.send("/set max_tokens 8\n")
    t.expect(">>> ")
    t.send('"""Two lines\nin one message"""\n')
    answered = t.expect("eval rate:")
    assert "eval count:           8 token(s)" in answered, answered
    t.expect(">>> ")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "conv.json")
        t.send(f"/save {path}\n")
        t.expect("Saved")
        saved = json.load(open(path))
        users = [m["content"] for m in saved["messages"] if m["role"] == "user"]
        assert users == ["Tell me a very long story about the sea.", "Two lines\nin one message"]
        assert saved["system"] == "You are brief."
    t.expect(">>> ")
    t.send("/bye\n")
    assert t.proc.wait(timeout=10) == 0


if __name__ == "__main__":
    from runner import run

    sys.exit(run(globals()))
