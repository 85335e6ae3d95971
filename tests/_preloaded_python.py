"""Test children that start with TensorFlow and Keras already imported.

Most of a test child's start is importing TensorFlow and Keras (about 5 s of CPU on a 2-core
CI machine), and the suite starts dozens of children. `run` and `Popen` stand in for
`subprocess`'s: a server per pytest worker imports TensorFlow and Keras once and forks one
child per call. It forks before any TensorFlow op has run and holds no other thread, so each
child starts TensorFlow's runtime afresh as a new process does (the kill launcher of
tests/_kill_fixtures.py does the same for `train`); the child then runs its script, `-c` code
or `-m` module as `python` would, exits as an interpreter does (atexit handlers, non-daemon
threads) and reports its exit status. A call that a fork cannot serve faithfully runs as a new
process: another interpreter or interpreter option, another Keras backend, or another value of
a setting read while TensorFlow and Keras import (`IMPORT_SETTINGS`). Tests of a new process
itself (start-up lines, which modules a command imports) call `subprocess` directly.
`KT_TEST_NO_PRELOAD=1` runs every child as a new process.
"""

import atexit
import contextlib
import json
import os
import pathlib
import shutil
import signal
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
        return int(json.loads(reply.next())["pid"]), reply

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
_children_cpu = 0.0  # CPU seconds of the servers' start-up and of their finished children
_children_cpu_lock = threading.Lock()


def children_cpu():
    """CPU seconds that this process's preloaded servers and their finished children used:
    what `resource.RUSAGE_CHILDREN` would hold had the children been this process's own."""
    return _children_cpu


def _add_children_cpu(seconds):
    global _children_cpu
    with _children_cpu_lock:
        _children_cpu += seconds


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


class ForkedProcess:
    """A child forked by a preloaded server, with what the tests use of `subprocess.Popen`:
    `pid`, `stdin`/`stdout`/`stderr` (file objects where given `subprocess.PIPE`), `poll`,
    `wait`, `communicate`, `send_signal`, `kill`, `terminate` and `returncode`."""

    def __init__(self, args, server, request, streams, text):
        self.args, self.returncode = args, None
        child_fds, opened = [], []
        for number, (choice, mode) in enumerate(zip(streams, "rww")):
            if choice == subprocess.STDOUT:
                self.stderr = None
                child_fds.append(child_fds[1])  # stderr into stdout's pipe or file
            else:
                child_fds.append(self._child_end(number, choice, mode, opened, text))
        try:
            self.pid, self._reply = server.start(request, child_fds)
        finally:
            for fd in opened:
                os.close(fd)
        self._ended = threading.Event()
        self._outputs = None
        threading.Thread(target=self._await_status, daemon=True).start()

    def _child_end(self, number, choice, mode, opened, text):
        """The child's file descriptor for its stream `number`; a pipe's other end becomes
        this object's `stdin`, `stdout` or `stderr`."""
        name = ("stdin", "stdout", "stderr")[number]
        setattr(self, name, None)
        if choice == subprocess.PIPE:
            read_end, write_end = os.pipe()
            child, mine = (read_end, write_end) if mode == "r" else (write_end, read_end)
            opened.append(child)
            ours = "w" if mode == "r" else "r"
            setattr(self, name, open(mine, ours if text else ours + "b"))
            return child
        if choice == subprocess.DEVNULL:
            opened.append(os.open(os.devnull, os.O_RDWR))
            return opened[-1]
        if choice is None:
            return number
        return choice if isinstance(choice, int) else choice.fileno()

    def _await_status(self):
        reply = json.loads(self._reply.next())
        self._reply.connection.close()
        _add_children_cpu(reply["cpu"])
        self.returncode = os.waitstatus_to_exitcode(reply["status"])
        self._ended.set()

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, signal_number):
        if self.returncode is None:
            try:
                os.kill(self.pid, signal_number)
            except ProcessLookupError:
                pass

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def communicate(self, input=None, timeout=None):
        """As `Popen.communicate`: writes `input`, reads both pipes to their end, waits."""
        if self._outputs is None:
            self._outputs, self._threads = {}, []
            for name in ("stdout", "stderr"):
                if getattr(self, name) is not None:
                    self._start(self._read, name)
            if self.stdin is not None:
                self._start(self._write, input)
        self.wait(timeout)
        for thread in self._threads:
            thread.join(timeout=30)
        return self._outputs.get("stdout"), self._outputs.get("stderr")

    def _start(self, target, argument):
        self._threads.append(threading.Thread(target=target, args=(argument,), daemon=True))
        self._threads[-1].start()

    def _read(self, name):
        with getattr(self, name) as pipe:
            self._outputs[name] = pipe.read()

    def _write(self, data):
        try:
            with self.stdin as pipe:
                if data:
                    pipe.write(data)
        except BrokenPipeError:
            pass


def Popen(args, *, stdin=None, stdout=None, stderr=None, text=False, cwd=None, env=None):  # noqa: N802
    """`subprocess.Popen(args, ...)` with the arguments the tests use: a `ForkedProcess`
    when a preloaded server's fork runs `args` as a new interpreter would."""
    env = dict(os.environ if env is None else env)
    request = _request(list(args), cwd, env)
    if request is None:
        return subprocess.Popen(
            args, stdin=stdin, stdout=stdout, stderr=stderr, text=text, cwd=cwd, env=env
        )
    return ForkedProcess(args, _server(env), request, (stdin, stdout, stderr), text)


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
    if capture_output:
        stdout = stderr = subprocess.PIPE
    stdin = subprocess.PIPE if input is not None else None
    process = Popen(args, stdin=stdin, stdout=stdout, stderr=stderr, text=text, cwd=cwd, env=env)
    with process if isinstance(process, subprocess.Popen) else contextlib.nullcontext():
        try:
            out, err = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            raise subprocess.TimeoutExpired(args, timeout, output=out, stderr=err) from None
    result = subprocess.CompletedProcess(args, process.returncode, out, err)
    if check:
        result.check_returncode()
    return result


class _Lines:
    """The server's reply lines on one connection."""

    def __init__(self, connection):
        self.connection = connection
        self.data = b""

    def next(self):
        while b"\n" not in self.data:
            chunk = self.connection.recv(4096)
            if not chunk:
                raise RuntimeError("the preloaded Python server ended before the child")
            self.data += chunk
        line, self.data = self.data.split(b"\n", 1)
        return line.decode()
