"""Ctrl+C at any moment of `make run` leaves nothing running.

`make run` runs as a newcomer runs it, in a session of its own, on free ports
and with a var dir (so a database and a sample) of its own. At a moment seen
from outside (the process tree, files, the HTTP endpoints) SIGINT goes to its
whole process group, as a terminal sends it; then make must end, and nothing
of its session may remain: no demomedia, ffmpeg, runworker or its scheduler
(which runs in a session of its own, so it is found by its environment),
runserver or its autoreloader's child.
"""

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from downloads import demo
from tests.proc import read_stat
from tests.services import free_port
from tests.waiting import wait_for, wait_until

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.once, pytest.mark.slow]

# The suite's own settings (its databases, var dir, secret, caches) are not a
# newcomer's; without XDG_CACHE_HOME uv finds its usual cache, so installs are quick.
SUITE_ONLY = ("TEST_", "PYTEST", "DJANGO_", "HAULAGE_", "JOBS_", "DOWNLOADS_", "CV_", "XDG_",
              "DATABASE_", "REDIS_", "SECRET_KEY", "DEBUG", "SECURE_")


def newcomer_env(**extra):
    return {**{k: v for k, v in os.environ.items() if not k.startswith(SUITE_ONLY)}, **extra}


def heed_ctrl_c():
    # A test worker ignores SIGINT, and so would make and run-site after it (a
    # shell cannot trap a signal ignored when it started); a terminal's shell
    # starts make with SIGINT at its default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def answers(url, method="GET"):
    try:
        return httpx.request(method, url, timeout=2, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


class MakeRun:
    """`make VENV=<venv> run` in a session of its own, with its own var dir and free ports."""

    def __init__(self, folder, venv):
        self.var = folder / "var"
        self.site = f"127.0.0.1:{free_port()}"
        self.sample = f"127.0.0.1:{free_port()}"
        self.log = folder / "make.log"
        self.marker = f"HAULAGE_VAR_DIR={self.var}".encode()
        env = newcomer_env(HAULAGE_VAR_DIR=str(self.var), HAULAGE_BIND=self.site,
                           HAULAGE_SAMPLE_BIND=self.sample)
        with open(self.log, "wb") as out:
            self.make = subprocess.Popen(
                ["make", f"VENV={venv}", "run"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=heed_ctrl_c,
            )

    def output(self):
        return self.log.read_text(errors="replace")

    def processes(self):
        """{pid: command line} of every live process of this run."""
        found = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                ours = (os.getsid(pid) == self.make.pid
                        or self.marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:  # gone, or not ours to read
                continue
            stat = read_stat(pid)
            if ours and stat is not None and stat[0] not in ("Z", "X"):
                found[pid] = command.decode(errors="replace").strip()
        return found

    def running(self, *words):
        return any(all(word in command for word in words) for command in self.processes().values())

    def wait_for(self, moment, seen):
        def reached():
            assert self.make.poll() is None, f"make ended before {moment}:\n{self.output()[-4000:]}"
            return seen()

        wait_for(reached, timeout=60, interval=0.02)

    def interrupt(self, moment):
        """Ctrl+C; then make must end and leave nothing behind."""
        os.killpg(self.make.pid, signal.SIGINT)
        ended = wait_until(lambda: self.make.poll() is not None, timeout=20)
        wait_until(lambda: not self.processes(), timeout=5)
        left = self.processes()
        if not ended or left:
            self.kill(left)
            pytest.fail(
                f"Ctrl+C during {moment}: make {'ended' if ended else 'still ran'}; left running:\n"
                + "".join(f"  {pid} {command}\n" for pid, command in left.items())
                + f"make's output:\n{self.output()[-4000:]}")
        assert self.make.returncode == -signal.SIGINT, self.output()[-4000:]

    def kill(self, pids=()):
        for pid in [-self.make.pid, *pids]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.make.wait(10)


@pytest.fixture
def make_run():
    runs = []

    def start(folder, venv):
        folder.mkdir(exist_ok=True)
        runs.append(MakeRun(folder, venv))
        return runs[-1]

    yield start
    for run in runs:
        if run.make.poll() is None or run.processes():
            run.kill(run.processes())


def test_ctrl_c_during_the_install(make_run, tmp_path):
    venv = tmp_path / "venv"
    run = make_run(tmp_path / "install", venv)
    run.wait_for("the install", lambda: run.running("uv pip install"))
    run.interrupt("the install")
    # The stamp comes last: the next `make run` installs again.
    assert not (venv / ".installed").exists()


def test_ctrl_c_while_the_site_starts_and_serves(make_run, tmp_path):
    venv = tmp_path / "venv"
    installed = subprocess.run(["make", f"VENV={venv}", "venv"], cwd=ROOT, env=newcomer_env(),
                               stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    run = make_run(tmp_path / "migration", venv)
    database = run.var / "haulage.sqlite3"
    run.wait_for("the migration", lambda: run.running("manage.py migrate") and database.exists())
    run.interrupt("the migration")

    run = make_run(tmp_path / "generation", venv)
    run.wait_for("the sample's generation", lambda: run.running("ffmpeg", str(run.var)))
    run.interrupt("the sample's generation")

    # The first answer comes while the sample is usually still being made.
    run = make_run(tmp_path / "ready", venv)
    run.wait_for("the site's first answer", lambda: answers(f"http://{run.site}/readyz"))
    run.interrupt("the site's first answer")

    # A later run finds its sample made (a small one here) and serves it at once.
    demo.generate(tmp_path / "serving" / "var" / "media" / demo.DEMO_DIR, width=160, height=120,
                  shot_s=1)
    run = make_run(tmp_path / "serving", venv)
    run.wait_for("the sample being served", lambda: (
        answers(f"http://{run.site}/readyz")
        and answers(f"http://{run.sample}/sample.mp4", method="HEAD")))
    run.interrupt("the sample being served")
