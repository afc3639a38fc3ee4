import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from downloads import demo


class Command(BaseCommand):
    help = (
        "Generate sample media under MEDIA_ROOT/demo/ and, with --serve, serve it on a local "
        "address so it can be downloaded offline (allow that address with "
        "DOWNLOADS_EGRESS_ALLOW, e.g. 127.0.0.1:8001)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--serve", metavar="HOST:PORT", default="",
                            help="serve the folder on this address until stopped")
        parser.add_argument("--rate", type=int, default=384 * 1024, metavar="BYTES_PER_S",
                            help="send at most this many bytes a second per download "
                                 "(default 384 KiB/s, so progress is visible; 0 for no limit)")

    def handle(self, *args, serve, rate, **options):
        folder = demo.generate()
        self.stdout.write(f"Sample media in {folder}")
        if not serve:
            return
        host, _, port = serve.rpartition(":")
        if not host or not port.isdigit():
            raise CommandError("--serve takes HOST:PORT, e.g. 127.0.0.1:8001.")
        server = demo.serve((host, int(port)), folder, rate_bytes_s=rate or None)
        base = f"http://{serve}"
        self.stdout.write(f"Serving on {base}/ — paste one of these on the Downloads page:\n"
                          f"  {base}/sample.mp4\n  {base}/hls/index.m3u8")
        stopped = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stopped.set())
        stopped.wait()
        server.shutdown()
