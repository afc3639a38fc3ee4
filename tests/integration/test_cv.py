"""Shots and clip measurements from real videos made by ffmpeg, and their durable result files.

No database and no Redis: `downloads.cv` and `downloads.cvresults` are plain functions over
files.
"""

import json
import math
import os
import struct
import subprocess

import pytest

from downloads import cv, cvresults
from downloads.ffmpeg import DEMUXERS, Container, locate

# Nothing here depends on the database: the SQLite pass skips it.
pytestmark = pytest.mark.dbless

FPS = 25
CUTS_S = (5, 10, 15)


def ffmpeg(*args):
    subprocess.run([locate().ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error", "-y", *args],
                   check=True)


@pytest.fixture(scope="session")
def media(tmp_path_factory):
    """The four-shot sample (red, testsrc, blue, SMPTE bars; hard cuts at 5, 10 and 15 s, with
    sound) and one-second white and black clips."""
    folder = tmp_path_factory.mktemp("cv-media")
    shots = folder / "shots.mp4"
    ffmpeg("-f", "lavfi", "-i", "color=red:s=320x240:d=5",
           "-f", "lavfi", "-i", "testsrc=s=320x240:d=5",
           "-f", "lavfi", "-i", "color=blue:s=320x240:d=5",
           "-f", "lavfi", "-i", "smptebars=s=320x240:d=5",
           "-f", "lavfi", "-i", "sine=frequency=440:duration=20",
           "-filter_complex", "[0:v][1:v][2:v][3:v]concat=n=4:v=1:a=0[v]",
           "-map", "[v]", "-map", "4:a", "-c:v", "libx264", "-pix_fmt", "yuv420p",
           "-c:a", "aac", "-shortest", str(shots))
    paths = {"shots": shots}
    for colour in ("white", "black"):
        paths[colour] = folder / f"{colour}.webm"
        ffmpeg("-f", "lavfi", "-i", f"color={colour}:s=160x120:d=1", "-c:v", "libvpx",
               str(paths[colour]))
    return paths


def jpeg_size(path):
    """(width, height) from a JPEG's start-of-frame segment."""
    data = path.read_bytes()
    assert data[:3] == b"\xff\xd8\xff", f"{path} is not a JPEG"
    position = 2
    while position < len(data):
        marker, length = data[position + 1], struct.unpack(">H", data[position + 2:position + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2):
            height, width = struct.unpack(">HH", data[position + 5:position + 9])
            return width, height
        position += 2 + length
    raise AssertionError(f"{path} has no start-of-frame segment")


# -- segment ---------------------------------------------------------------------------------


def test_segment_finds_the_cuts_of_the_four_shot_sample_within_one_frame(media, tmp_path):
    result = cv.segment(media["shots"], out_dir=tmp_path)

    assert result["fps"] == FPS
    assert result["frame_count"] == 20 * FPS
    assert result["duration_s"] == pytest.approx(20, abs=1 / FPS)
    assert [shot["index"] for shot in result["shots"]] == [0, 1, 2, 3]
    cuts = [shot["start_frame"] for shot in result["shots"][1:]]
    for found, expected_s in zip(cuts, CUTS_S, strict=True):
        assert abs(found - expected_s * FPS) <= 1
    for shot in result["shots"][1:]:
        assert shot["start_s"] == pytest.approx(shot["start_frame"] / FPS, abs=0.001)
    for before, after in zip(result["shots"], result["shots"][1:], strict=False):
        assert before["end_frame"] == after["start_frame"]
        assert before["end_s"] == after["start_s"]
    assert result["shots"][0]["start_frame"] == 0
    assert result["shots"][-1]["end_frame"] == 20 * FPS
    for shot in result["shots"]:
        assert jpeg_size(tmp_path / shot["thumbnail"]) == (320, 240)
    assert json.loads(json.dumps(result, allow_nan=False)) == result


def mean_rgb(image_path):
    """The average colour of an image, as ffmpeg scales it to one pixel."""
    pixel = subprocess.run(
        [locate().ffmpeg, "-nostdin", "-loglevel", "error", "-i", str(image_path), "-vf",
         "scale=1:1:flags=area", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        check=True, capture_output=True,
    ).stdout
    return tuple(pixel)


def test_segment_thumbnails_show_their_own_shot(media, tmp_path):
    result = cv.segment(media["shots"], out_dir=tmp_path)
    red, blue = (mean_rgb(tmp_path / result["shots"][i]["thumbnail"]) for i in (0, 2))
    assert math.dist(red, (255, 0, 0)) < 40
    assert math.dist(blue, (0, 0, 255)) < 40


def test_segment_reports_progress_in_order(media, tmp_path):
    reports = []
    cv.segment(media["shots"], out_dir=tmp_path, report=lambda fraction, *, phase, message: reports.append((fraction, phase, message)))

    fractions = [fraction for fraction, _, _ in reports]
    assert fractions == sorted(fractions)
    assert all(0 <= fraction <= 1 for fraction in fractions)
    phases = [phase for _, phase, _ in reports]
    assert phases[0] == "detecting" and "thumbnails" in phases
    assert reports[-1][:2] == (1.0, "done")
    assert all(isinstance(message, str) and message for _, _, message in reports)


def test_segment_stops_when_asked_before_starting(media, tmp_path):
    with pytest.raises(cv.Cancelled) as caught:
        cv.segment(media["shots"], out_dir=tmp_path, should_stop=lambda: True)
    assert caught.value.code == "cancelled"
    assert list(tmp_path.iterdir()) == []


def test_segment_stops_when_asked_during_the_work(media, tmp_path):
    polls = []

    def should_stop():
        polls.append(1)
        return len(polls) >= 2  # the first poll is before any work

    with pytest.raises(cv.Cancelled):
        cv.segment(media["shots"], out_dir=tmp_path, should_stop=should_stop)
    assert len(polls) == 2
    assert not list(tmp_path.glob("thumbnails/*.jpg"))


def test_segment_reads_a_file_whose_name_looks_like_an_option(media, tmp_path):
    odd = tmp_path / "-i:file.mp4"
    odd.write_bytes(media["shots"].read_bytes())
    result = cv.segment(odd, out_dir=tmp_path / "out")
    assert len(result["shots"]) == 4
    assert all((tmp_path / "out" / shot["thumbnail"]).exists() for shot in result["shots"])


def test_thumbnail_argv_names_the_demuxer_and_allows_only_local_files():
    mp4 = Container("mp4", "mov")
    argv = cv.thumbnail_argv("/media/v.mp4", mp4, [(1.5, "/out/a.jpg"), (4.0, "/out/b.jpg")])
    assert argv[0] == locate().ffmpeg
    inputs = [i for i, arg in enumerate(argv) if arg == "-i"]
    assert [argv[i - 8:i + 2] for i in inputs] == [
        ["-ss", "1.500", "-protocol_whitelist", "file,pipe", "-format_whitelist",
         DEMUXERS, "-f", "mov", "-i", "file:/media/v.mp4"],
        ["-ss", "4.000", "-protocol_whitelist", "file,pipe", "-format_whitelist",
         DEMUXERS, "-f", "mov", "-i", "file:/media/v.mp4"],
    ]
    assert argv[-1] == "file:/out/b.jpg" and "file:/out/a.jpg" in argv


# -- unreadable input ------------------------------------------------------------------------


@pytest.fixture(params=["random", "text", "playlist", "truncated", "empty", "mpegts"])
def unreadable(request, media, tmp_path):
    path = tmp_path / "video.mp4"
    contents = {
        "random": os.urandom(64 * 1024),
        "text": b"<html><body>Not found</body></html>\n",
        # ffmpeg would probe this as HLS and follow it to a local file if not told the format.
        "playlist": b"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\nfile:///etc/passwd\n",
        # the MP4 signature, but the index (at the end) is missing
        "truncated": media["shots"].read_bytes()[:4096],
        "empty": b"",
        # a container ffmpeg reads, but without the index a thumbnail's seek needs
        "mpegts": (b"\x47" + bytes(187)) * 8,
    }
    path.write_bytes(contents[request.param])
    return path


def test_segment_refuses_an_unreadable_file(unreadable, tmp_path):
    with pytest.raises(cv.UnreadableVideo) as caught:
        cv.segment(unreadable, out_dir=tmp_path / "out")
    assert caught.value.code == "unreadable_video"
    assert isinstance(caught.value, cv.CVError)


def test_analyze_refuses_an_unreadable_file(unreadable, tmp_path):
    with pytest.raises(cv.UnreadableVideo):
        cv.analyze(unreadable, start_s=0, end_s=1, out_dir=tmp_path / "out")


def test_a_missing_file_says_so(tmp_path):
    with pytest.raises(cv.MissingVideo) as caught:
        cv.segment(tmp_path / "gone.mp4", out_dir=tmp_path)
    assert caught.value.code == "missing_video"
    with pytest.raises(cv.MissingVideo):
        cv.analyze(tmp_path / "gone.mp4", start_s=0, end_s=1, out_dir=tmp_path)


# -- analyze ---------------------------------------------------------------------------------


def test_analyze_brightness_of_white_and_black(media, tmp_path):
    white = cv.analyze(media["white"], start_s=0, end_s=1, out_dir=tmp_path / "w")
    black = cv.analyze(media["black"], start_s=0, end_s=1, out_dir=tmp_path / "b")
    assert white["brightness"] > 0.9
    assert black["brightness"] < 0.1
    assert white["colors"][0]["hex"][1:3] >= "f0"
    assert black["colors"][0]["hex"][1:3] <= "10"


def hex_rgb(value):
    return tuple(int(value[i:i + 2], 16) for i in (1, 3, 5))


@pytest.mark.parametrize(("start_s", "end_s", "colour"), [(0, 5, (255, 0, 0)),
                                                          (10, 15, (0, 0, 255))])
def test_analyze_dominant_colour_of_a_flat_shot(media, tmp_path, start_s, end_s, colour):
    # The blue shot starts mid-file: this also checks the seek lands on the clip.
    result = cv.analyze(media["shots"], start_s=start_s, end_s=end_s, out_dir=tmp_path)
    top = result["colors"][0]
    assert top["share"] > 0.95
    assert math.dist(hex_rgb(top["hex"]), colour) < 30


def test_analyze_motion_of_a_moving_pattern_exceeds_a_still_colour(media, tmp_path):
    moving = cv.analyze(media["shots"], start_s=5, end_s=10, out_dir=tmp_path / "m")
    still = cv.analyze(media["shots"], start_s=10, end_s=15, out_dir=tmp_path / "s")
    assert moving["motion_mean"] > still["motion_mean"]
    assert still["motion_mean"] < 0.001
    # sampled about four times a second, with times from the clip's start
    assert len(moving["motion"]) == pytest.approx(5 * cv.SAMPLE_RATE_HZ, abs=1)
    times = [t for t, _ in moving["motion"]]
    assert times == sorted(times) and 0 <= times[0] < 0.3 and times[-1] < 5
    assert len(moving["colors"]) > 2  # testsrc is many colours


def test_analyze_keyframe_strip(media, tmp_path):
    result = cv.analyze(media["shots"], start_s=5, end_s=10, out_dir=tmp_path)
    assert result["strip_tile"] == [cv.STRIP_TILE_WIDTH_PX, 120]
    assert jpeg_size(tmp_path / result["keyframe_strip"]) == (cv.STRIP_FRAMES * 160, 120)
    assert len(result["keyframe_times_s"]) == cv.STRIP_FRAMES
    assert all(5 <= t < 10 for t in result["keyframe_times_s"])
    assert result["duration_s"] == 5.0 and result["frame_count"] == 5 * FPS
    assert json.loads(json.dumps(result, allow_nan=False)) == result


@pytest.mark.parametrize(("start_s", "end_s"), [(3, 3), (4, 2), (-1, 2), (25, 30),
                                                (0, float("nan"))])
def test_analyze_refuses_an_empty_or_outside_clip(media, tmp_path, start_s, end_s):
    with pytest.raises(cv.InvalidClip) as caught:
        cv.analyze(media["shots"], start_s=start_s, end_s=end_s, out_dir=tmp_path)
    assert caught.value.code == "invalid_clip"


def test_analyze_stops_when_asked(media, tmp_path):
    with pytest.raises(cv.Cancelled):
        cv.analyze(media["shots"], start_s=0, end_s=20, out_dir=tmp_path,
                   should_stop=lambda: True)


# -- result files ----------------------------------------------------------------------------


def segment_result():
    return {"kind": "segment", "fps": 25.0, "frame_count": 500, "duration_s": 20.0,
            "shots": [{"index": 0, "start_s": 0.0, "end_s": 20.0, "start_frame": 0,
                       "end_frame": 500, "thumbnail": "thumbnails/0000.jpg"}]}


def test_result_round_trip_through_a_job_folder(media, tmp_path):
    folder = cvresults.job_dir(tmp_path, 42)
    analysis = cv.analyze(media["shots"], start_s=0, end_s=5, out_dir=folder)
    path = cvresults.result_path(tmp_path, 42)
    assert path == tmp_path / "cv" / "42" / "result.json"

    written = cvresults.write_result(path, analysis)

    assert written["version"] == cvresults.RESULT_VERSION
    assert cvresults.read_result(path) == written
    assert sorted(p.name for p in folder.iterdir()) == ["keyframes.jpg", "result.json"]


def test_writing_again_replaces_the_result_whole(tmp_path):
    path = tmp_path / "result.json"
    cvresults.write_result(path, segment_result())
    second = {**segment_result(), "frame_count": 501}
    cvresults.write_result(path, second)
    assert cvresults.read_result(path)["frame_count"] == 501


def test_a_failed_write_keeps_the_previous_result_and_leaves_no_partial_file(tmp_path):
    path = tmp_path / "result.json"
    cvresults.write_result(path, segment_result())
    with pytest.raises(ValueError):
        cvresults.write_result(path, {**segment_result(), "duration_s": float("nan")})
    assert cvresults.read_result(path)["duration_s"] == 20.0
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_reading_a_missing_result(tmp_path):
    with pytest.raises(cvresults.ResultMissing):
        cvresults.read_result(tmp_path / "result.json")


@pytest.mark.parametrize("raw", [
    b"{not json",
    b'{"version": 1, "kind": "segment", "fps": NaN}',
    b"[1, 2]",
    json.dumps({**segment_result(), "version": 2}).encode(),
    json.dumps({**segment_result(), "version": 1, "kind": "transcode"}).encode(),
    json.dumps({**segment_result(), "version": 1, "fps": "25"}).encode(),
    json.dumps({**segment_result(), "version": 1, "frame_count": True}).encode(),
    json.dumps({**segment_result(), "version": 1, "shots": [{"index": 0}]}).encode(),
    json.dumps({**segment_result(), "version": 1, "shots": [
        {**segment_result()["shots"][0], "thumbnail": "../../etc/passwd"}]}).encode(),
    json.dumps({**segment_result(), "version": 1, "shots": [
        {**segment_result()["shots"][0], "thumbnail": "/etc/passwd"}]}).encode(),
    b"\xff\xfe",
])
def test_reading_a_result_of_the_wrong_shape(tmp_path, raw):
    path = tmp_path / "result.json"
    path.write_bytes(raw)
    with pytest.raises(cvresults.ResultInvalid):
        cvresults.read_result(path)


def test_writing_a_result_of_the_wrong_shape_is_refused(tmp_path):
    with pytest.raises(cvresults.ResultInvalid):
        cvresults.write_result(tmp_path / "result.json", {"kind": "segment"})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("job_id", ["../x", "a/b", "", ".", "x" * 65])
def test_job_folder_refuses_ids_that_are_not_a_plain_name(tmp_path, job_id):
    with pytest.raises(ValueError):
        cvresults.job_dir(tmp_path, job_id)
