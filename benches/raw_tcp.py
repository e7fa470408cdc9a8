"""Raw TCP throughput between two endpoints: the limit the MPI benchmarks are held against.

    python3 raw_tcp.py recv HOST PORT STREAMS [BLOCK]          # accept STREAMS connections, drain them
    python3 raw_tcp.py send HOST PORT STREAMS SECONDS [BLOCK]  # write BLOCK-byte writes (1 MiB)
                                                               # on each for SECONDS

The sender prints "raw TCP N stream(s) of K KiB writes: X GB/s" (bytes written over the wall
time).
"""
import socket
import sys
import threading
import time


def recv(host, port, streams, block):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(16)

    def drain(c):
        v = memoryview(bytearray(block))
        while c.recv_into(v):
            pass

    ts = []
    for _ in range(streams):
        c, _ = srv.accept()
        t = threading.Thread(target=drain, args=(c,))
        t.start()
        ts.append(t)
    for t in ts:
        t.join()


def send(host, port, streams, secs, block):
    data = b"\0" * block
    socks = [socket.create_connection((host, port)) for _ in range(streams)]
    sent = [0] * streams
    end = time.time() + secs

    def pump(i):
        while time.time() < end:
            socks[i].sendall(data)
            sent[i] += len(data)
        socks[i].close()

    t0 = time.time()
    ts = [threading.Thread(target=pump, args=(i,)) for i in range(streams)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    gbps = sum(sent) / (time.time() - t0) / 1e9
    print(f"raw TCP {streams} stream(s) of {block >> 10} KiB writes: {gbps:.2f} GB/s")


if __name__ == "__main__":
    mode, host, port, streams = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if mode == "recv":
        recv(host, port, streams, int(sys.argv[5]) if len(sys.argv) > 5 else 1 << 20)
    else:
        send(host, port, streams, float(sys.argv[5]), int(sys.argv[6]) if len(sys.argv) > 6 else 1 << 20)
