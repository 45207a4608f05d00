"""The test ports helper: a port one live process claimed is never handed out by another, and the
offsets a RocketMQ broker derives from its listen port are claimed with it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from ports import controlplane, free_port


def test_derived_ports_are_claimed_with_the_listen_port() -> None:
    port = free_port(also=(-2, 1))
    for taken in (port - 2, port, port + 1):
        assert taken in controlplane._HANDED_OUT
        assert (controlplane._CLAIMS / str(taken)).read_text() == str(os.getpid())


def test_a_live_process_claim_blocks_others_and_a_dead_one_is_taken_over() -> None:
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(controlplane.HERE)!r})
        import controlplane
        print(controlplane.free_ports(1)[0], flush=True)
        sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdin is not None
    port = int(child.stdout.readline())
    assert not controlplane._claim(port), "a port a live process claimed was claimed again"

    child.stdin.close()
    assert child.wait(30) == 0
    assert not (controlplane._CLAIMS / str(port)).exists(), "the exiting process left its claim"

    # A process killed before its exit hook ran leaves its file; the next claimer takes it over.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          check=True, capture_output=True, text=True)
    (controlplane._CLAIMS / str(port)).write_text(dead.stdout.strip())
    assert controlplane._claim(port)
    controlplane._HANDED_OUT.add(port)  # released with this process's other claims at exit
