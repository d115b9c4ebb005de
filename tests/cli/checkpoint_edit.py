"""Moving a checkpoint directory's `latest` under a running trainer, for the resume tests (test_resume.py and
tests/mpi/test_mpi_resume.py): the test hooks hold the run at a known point and say so on stderr."""
import os
import subprocess


def point_latest(ck, name):
    """ck/latest names step directory `name`, replaced atomically (as the checkpointer writes it)."""
    (ck / "latest.tmp").write_text(name + "\n")
    os.replace(ck / "latest.tmp", ck / "latest")


def run_moving_latest(cmd, env, cwd, ck, name, *needles, timeout=180):
    """Runs cmd and, once a line with each of `needles` has come on its stderr, points ck/latest at `name`:
    (return code, stderr). Fails the test when a needle never came."""
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=cwd)
    err, waiting = [], set(needles)
    try:
        for line in p.stderr:
            err.append(line)
            waiting -= {n for n in waiting if n in line}
            if not waiting:
                point_latest(ck, name)
                break
        err.append(p.communicate(timeout=timeout)[1])
    finally:
        p.kill()
    assert not waiting, f"never came: {waiting}; {''.join(err)[-3000:]}"
    return p.returncode, "".join(err)
