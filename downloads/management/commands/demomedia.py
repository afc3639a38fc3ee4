import signal

from django.core.management.base import BaseCommand, CommandError

from downloads import demo

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def stop(signum, frame):
    # The first stop is the only one: Ctrl+C may be followed by a TERM from
    # whatever started us, and a second KeyboardInterrupt would cut short the
    # unwinding of the first (subprocess.run killing ffmpeg on its way out).
    for each in STOP_SIGNALS:
        signal.signal(each, signal.SIG_IGN)
    raise KeyboardInterrupt


def parse_address(text):
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise CommandError("--serve takes HOST:PORT, e.g. 127.0.0.1:8001.")
    return host, int(port)


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
        address = parse_address(serve) if serve else None
        # SIGINT and SIGTERM end the command from here on, through KeyboardInterrupt:
        # stopped while ffmpeg writes the sample, subprocess.run kills it.
        for signum in STOP_SIGNALS:
            signal.signal(signum, stop)
        try:
            folder = demo.generate()
            self.stdout.write(f"Sample media in {folder}")
            if address:
                self.serve(address, folder, rate)
        except KeyboardInterrupt:
            pass

    def serve(self, address, folder, rate):
        try:
            server = demo.Origin(address, folder, rate_bytes_s=rate or None)
        except OSError as exc:
            raise CommandError(f"Cannot serve on {address[0]}:{address[1]}: "
                               f"{exc.strerror or exc}.") from exc
        base = f"http://{address[0]}:{address[1]}"
        self.stdout.write(f"Serving on {base}/ — paste one of these on the Downloads page:\n"
                          f"  {base}/sample.mp4\n  {base}/hls/index.m3u8")
        # In the main thread, where Python runs signal handlers: its loop wakes
        # twice a second, so a signal that landed on a request's thread is acted
        # on too (a main thread asleep on a lock may never see it).
        try:
            server.serve_forever()
        finally:
            server.server_close()
