"""TLS for tests: a private CA with a leaf certificate for 127.0.0.1, and a TLS-terminating relay
that puts an https:// front on a plain HTTP server (the Iceberg REST fixture)."""
import socket
import ssl
import subprocess
import threading


def make_ca(d):
    """Writes ca.pem, cert.pem and key.pem (a leaf for localhost and 127.0.0.1, signed by the
    CA) into folder `d`; returns (ca, cert, key) paths."""
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, cwd=d)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
        "/CN=floe-test-ca", "-keyout", "ca.key", "-out", "ca.pem")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
        "-keyout", "key.pem", "-out", "leaf.csr")
    (d / "leaf.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    run("openssl", "x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "leaf.ext", "-out", "cert.pem")
    return d / "ca.pem", d / "cert.pem", d / "key.pem"


class TlsRelay:
    """Accepts TLS on 127.0.0.1:<port> and relays the plain bytes to 127.0.0.1:<upstream>."""

    def __init__(self, upstream_port, cert, key):
        self.upstream = ("127.0.0.1", upstream_port)
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(cert), str(key))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.handshakes = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw):
        try:
            tls = self.ctx.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()  # a client that does not trust the certificate ends here
            return
        self.handshakes += 1
        up = socket.create_connection(self.upstream)
        threading.Thread(target=_pump, args=(up, tls), daemon=True).start()
        _pump(tls, up)

    def close(self):
        self.listener.close()


def _pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.close()
            except OSError:
                pass
