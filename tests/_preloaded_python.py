"""Test children that start with TensorFlow and Keras already imported.

Most of a test child's start is importing TensorFlow and Keras (about 5 s of CPU on a 2-core
CI machine), and the suite starts dozens of children. `run` is `subprocess.run` for them: a
server per pytest worker imports TensorFlow and Keras once and forks one child per call. It
forks before any TensorFlow op has run and holds no other thread, so each child starts
TensorFlow's runtime afresh as a new process does (the kill launcher of
tests/_kill_fixtures.py does the same for `train`); the child then runs its script, `-c` code
or `-m` module as `python` would, exits as an interpreter does (atexit handlers, non-daemon
threads) and reports its exit status. A call that a fork cannot serve faithfully runs as a new
process: another interpreter or interpreter option, another Keras backend, or another value of
a setting read while TensorFlow and Keras import (`IMPORT_SETTINGS`). Tests of a new process
itself (start-up lines, which modules a command imports) call `subprocess` directly.
`KT_TEST_NO_PRELOAD=1` runs every child as a new process.
"""

import atexit
import json
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading

# Environment variables read while TensorFlow and Keras import (or fixed for the process by
# then): a child whose value differs from its server's would not start as it would alone.
IMPORT_SETTINGS = ("KERAS_", "PYTHON", "TF_", "XLA_", "CUDA_", "KT_TEST_TF_DEFAULTS")
# Read when the program creates them, after the fork: free to differ per child.
RUNTIME_SETTINGS = ("TF_CONFIG",)

SERVER = r"""
import json, os, select, shutil, signal, socket, struct, sys

import keras
import tensorflow

def read_request(connection):
    head, fds, _, _ = socket.recv_fds(connection, 4, 3)
    size = struct.unpack("!I", head)[0]
    body = b""
    while len(body) < size:
        body += connection.recv(size - len(body))
    return json.loads(body), fds

def serve(path):
    # Returns only in a forked child: its request, with its standard streams in place.
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    import resource
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print("ready", usage.ru_utime + usage.ru_stime, flush=True)
    waiting = {}  # pid -> the connection that hears its exit status
    while True:
        readable, _, _ = select.select([listener, wake_read, sys.stdin], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1024):
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            os._exit(0)  # the pytest worker ended
        if wake_read in readable:
            os.read(wake_read, 1024)
        while waiting:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = waiting.pop(pid)
            cpu = usage.ru_utime + usage.ru_stime
            connection.sendall(json.dumps({"status": status, "cpu": cpu}).encode() + b"\n")
            connection.close()
        if listener in readable:
            connection, _ = listener.accept()
            request, fds = read_request(connection)
            pid = os.fork()
            if pid == 0:
                for kept in (listener, connection):
                    kept.close()
                for fd in (wake_read, wake_write):
                    os.close(fd)
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                    os.close(fd)
                return request
            for fd in fds:
                os.close(fd)
            connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            waiting[pid] = connection

request = serve(sys.argv[1])
del serve, read_request
os.chdir(request["cwd"])
os.environ.clear()
os.environ.update(request["env"])
sys.stdin = open(0, "r", closefd=False)
sys.argv = request["argv"]
sys.path[0] = request["path0"]
import runpy
if request["mode"] == "-m":
    runpy.run_module(request["target"], run_name="__main__", alter_sys=True)
elif request["mode"] == "-c":
    import types
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    exec(compile(request["target"], "<string>", "exec"), main.__dict__)
else:
    runpy.run_path(request["target"], run_name="__main__")
"""


def _import_key(env):
    """The settings of `env` that a child and its server must share."""
    return tuple(
        sorted(
            (name, value)
            for name, value in env.items()
            if name.startswith(IMPORT_SETTINGS) and name not in RUNTIME_SETTINGS
        )
    )


class _Server:
    """One server process: TensorFlow and Keras imported under one set of import settings."""

    def __init__(self, env):
        self.folder = tempfile.mkdtemp(prefix="kt-preloaded-")
        self.path = os.path.join(self.folder, "socket")
        # Its own start-up lines (TensorFlow's) in a file, shown if it fails to start.
        self._errors = pathlib.Path(self.folder) / "server.err"
        with open(self._errors, "w") as errors:
            self.process = subprocess.Popen(
                [sys.executable, "-c", SERVER, self.path],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )
        line = self.process.stdout.readline().split()
        if not line or line[0] != "ready":
            self.process.kill()
            self.process.wait()
            raise RuntimeError(
                "the preloaded Python server did not start:\n" + self._errors.read_text()[-3000:]
            )
        _add_children_cpu(float(line[1]))

    def start(self, request, fds):
        """Forks a child for `request` with `fds` as its stdin, stdout and stderr; returns the
        child's pid and the connection that will hear its wait status."""
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(self.path)
        body = json.dumps(request).encode()
        socket.send_fds(connection, [struct.pack("!I", len(body))], list(fds))
        connection.sendall(body)
        reply = _Lines(connection)
        return int(json.loads(reply.next(None))["pid"]), reply

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()  # the server ends on its stdin's end
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


_servers = {}
_servers_lock = threading.Lock()
_children_cpu = [0.0]  # CPU seconds of the servers' start-up and of their finished children
_children_cpu_lock = threading.Lock()


def children_cpu():
    """CPU seconds that this process's preloaded servers and their finished children used:
    what `resource.RUSAGE_CHILDREN` would hold had the children been this process's own."""
    return _children_cpu[0]


def _add_children_cpu(seconds):
    with _children_cpu_lock:
        _children_cpu[0] += seconds


def _server(env):
    key = _import_key(env)
    with _servers_lock:
        if key not in _servers:
            if not _servers:
                atexit.register(_close_servers)
            _servers[key] = _Server(env)
        return _servers[key]


def _close_servers():
    for server in _servers.values():
        server.close()
    _servers.clear()


def _request(args, cwd, env):
    """The server request that runs `args` as `python` would, or None when a fork of a
    preloaded server would not run it faithfully."""
    if os.environ.get("KT_TEST_NO_PRELOAD") == "1" or len(args) < 2:
        return None
    if os.path.realpath(args[0]) != os.path.realpath(sys.executable):
        return None
    if env.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
        return None
    cwd = os.path.abspath(cwd or os.getcwd())
    option, rest = str(args[1]), [str(arg) for arg in args[2:]]
    if option in ("-c", "-m"):
        if not rest:
            return None
        mode, target, argv = option, rest[0], [option, *rest[1:]]
        path0 = "" if option == "-c" else cwd
    elif option.startswith("-"):
        return None  # an interpreter option (-u, -X, -W ...): a real interpreter
    else:
        script = os.path.join(cwd, option)
        mode, target, argv = "script", script, [option, *rest]
        path0 = os.path.dirname(os.path.realpath(script))
    return {
        "mode": mode,
        "target": target,
        "argv": argv,
        "path0": path0,
        "cwd": cwd,
        "env": dict(env),
    }


def run(
    args,
    *,
    input=None,
    capture_output=False,
    stdout=None,
    stderr=None,
    text=False,
    timeout=None,
    check=False,
    cwd=None,
    env=None,
):
    """`subprocess.run(args, ...)` with the arguments the tests use; a Python child starts
    from a fork of a preloaded server when that runs it as a new interpreter would."""
    env = dict(os.environ if env is None else env)
    request = _request(list(args), cwd, env)
    if request is None:
        return subprocess.run(
            args,
            input=input,
            capture_output=capture_output,
            stdout=stdout,
            stderr=stderr,
            text=text,
            timeout=timeout,
            check=check,
            cwd=cwd,
            env=env,
        )
    if capture_output:
        stdout = stderr = subprocess.PIPE
    server = _server(env)
    opened, ours = [], []  # pipes' ends: the child's (closed once sent), ours (read, written)

    def stream(choice, inherited, mode):
        if choice == subprocess.PIPE:
            read_end, write_end = os.pipe()
            child, mine = (read_end, write_end) if mode == "w" else (write_end, read_end)
            opened.append(child)
            ours.append(mine)
            return child, os.fdopen(mine, "wb" if mode == "w" else "rb")
        if choice == subprocess.DEVNULL:
            child = os.open(os.devnull, os.O_RDWR)
            opened.append(child)
            return child, None
        if choice is None:
            return inherited, None
        return (choice if isinstance(choice, int) else choice.fileno()), None

    stdin_fd, to_child = stream(subprocess.PIPE if input is not None else None, 0, "w")
    stdout_fd, from_stdout = stream(stdout, 1, "r")
    if stderr == subprocess.STDOUT:
        stderr_fd, from_stderr = stdout_fd, None
    else:
        stderr_fd, from_stderr = stream(stderr, 2, "r")
    try:
        pid, reply = server.start(request, (stdin_fd, stdout_fd, stderr_fd))
    finally:
        for fd in opened:
            os.close(fd)
    outputs = {}

    def drain(name, pipe):
        outputs[name] = pipe.read()
        pipe.close()

    threads = [
        threading.Thread(target=drain, args=(name, pipe), daemon=True)
        for name, pipe in (("stdout", from_stdout), ("stderr", from_stderr))
        if pipe
    ]
    if to_child is not None:
        data = input.encode() if isinstance(input, str) else input
        threads.append(
            threading.Thread(target=_write_and_close, args=(to_child, data), daemon=True)
        )
    for thread in threads:
        thread.start()
    status = _wait(reply, pid, timeout)
    for thread in threads:
        thread.join(timeout=30)
    out, err = (outputs.get(name) for name in ("stdout", "stderr"))
    if text:
        out, err = (None if data is None else data.decode() for data in (out, err))
    if status is None:
        raise subprocess.TimeoutExpired(args, timeout, output=out, stderr=err)
    result = subprocess.CompletedProcess(args, os.waitstatus_to_exitcode(status), out, err)
    if check:
        result.check_returncode()
    return result


def _write_and_close(pipe, data):
    try:
        pipe.write(data)
    except BrokenPipeError:
        pass
    finally:
        try:
            pipe.close()
        except BrokenPipeError:
            pass


def _wait(reply, pid, timeout):
    """The child's wait status; None, with the child killed, after `timeout` seconds."""
    try:
        line = reply.next(timeout)
    except TimeoutError:
        os.kill(pid, 9)
        reply.next(None)  # the server reaps it
        return None
    finally:
        reply.connection.close()
    reply = json.loads(line)
    _add_children_cpu(reply["cpu"])
    return int(reply["status"])


class _Lines:
    """The server's reply lines on one connection."""

    def __init__(self, connection):
        self.connection = connection
        self.data = b""

    def next(self, timeout):
        self.connection.settimeout(timeout)
        while b"\n" not in self.data:
            chunk = self.connection.recv(4096)
            if not chunk:
                raise RuntimeError("the preloaded Python server ended before the child")
            self.data += chunk
        line, self.data = self.data.split(b"\n", 1)
        return line.decode()
