"""What an MCP client starts in place of ``server.py`` when its server comes from the zygote.

Usage: python -S server_trampoline.py SOCKET_PATH PROJECT. It hands its standard streams, its
environment and its working directory to the zygote (``server_zygote.py``), which forks the
server; it then holds on until that server ends and exits with its status, as the server
itself would. A TERM is passed on to the server; if this process is killed outright, the
zygote ends the server.
"""

import array
import json
import os
import signal
import socket
import sys


def main(socket_path: str, project: str) -> int:
    zygote = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    zygote.connect(socket_path)
    header = json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "project": project}).encode()
    zygote.sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
    # Only the server holds the streams now: its output ends when it does.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    replies = zygote.makefile("r")
    server = int(replies.readline())
    signal.signal(signal.SIGTERM, lambda *_: os.kill(server, signal.SIGTERM))
    status = replies.readline()
    return int(status) if status else 1


if __name__ == "__main__":
    code = main(sys.argv[1], sys.argv[2])
    sys.exit(128 - code if code < 0 else code)
