"""No user's burst of insight requests pushes another user's request back: a per-user cap on
what may wait (429 past it) and a per-user engine key on what may run."""

import pytest
from django.test import Client

from downloads import services as downloads
from downloads.models import Download, MediaAsset, Shot
from insights import conf
from insights import services as insights
from insights.models import InsightKind
from jobs.models import Job, JobStatus

pytestmark = pytest.mark.django_db(transaction=True)
BURST = 226  # what one user sent in 2.5 s


@pytest.fixture
def shots(user, other_user, settings):
    """A finished video both users hold, measured already, with more shots than the burst."""
    settings.INSIGHTS_GATEWAY_URL = ""
    mine = downloads.download_submit(owner=user, url="https://videos.example.com/long.mp4")
    theirs = Download.objects.create(owner=other_user, asset=mine.asset)
    MediaAsset.objects.filter(pk=mine.asset_id).update(state="ready", file="assets/x/media.mp4",
                                                       title="Long", duration_s=BURST + 1.0)
    Job.objects.filter(pk=mine.job_id).update(status=JobStatus.SUCCESSFUL)
    Download.objects.filter(pk__in=[mine.pk, theirs.pk]).update(status="successful")
    Shot.objects.bulk_create(
        Shot(asset_id=mine.asset_id, index=i, start_s=float(i), end_s=i + 1.0,
             analysis={"brightness": 0.5, "motion_mean": 0.1}) for i in range(BURST + 1))
    return list(Shot.objects.filter(asset_id=mine.asset_id).order_by("index"))


def ask(client, shot):
    return client.post("/api/insights/", {"kind": "shot_notes", "subject": shot.pk},
                       content_type="application/json")


def test_a_burst_is_capped_and_the_next_users_request_runs_among_the_first(
        shots, user, other_user, run_worker):
    alice, bob = Client(), Client()
    alice.force_login(user)
    bob.force_login(other_user)

    answers = [ask(alice, shot) for shot in shots[:BURST]]
    accepted = [a for a in answers if a.status_code == 202]
    refused = [a for a in answers if a.status_code == 429]
    assert len(accepted) == conf.user_queued() and len(refused) == BURST - len(accepted)
    assert refused[0].json() == {"error": refused[0].json()["error"], "error_code": "queue_full",
                                 "limit": conf.user_queued()}
    assert ask(bob, shots[BURST]).status_code == 202
    bobs = Job.objects.get(owner=other_user, kind="insights.shot_notes")

    # Alice's waiting requests sit behind her own key, out of the claim index: one worker
    # slot takes Bob's next.
    run_worker(queues=[conf.queue()], concurrency=1)
    order = list(Job.objects.filter(kind="insights.shot_notes").order_by("started_at", "pk")
                 .values_list("pk", flat=True))
    assert len(order) == conf.user_queued() + 1
    # At most the few Alice had waiting go before it: her burst's refused part counts for nothing.
    assert order.index(bobs.pk) <= conf.user_queued(), order.index(bobs.pk)


def test_prefetches_never_crowd_out_what_the_user_asks_for(shots, user):
    # New shot data for many shots: prefetches stop at the cap, silently...
    for shot in shots[:conf.user_queued() + 5]:
        insights.insights_prefetch(user, shot_id=shot.pk)
    assert Job.objects.live().filter(owner=user).count() == conf.user_queued()
    with pytest.raises(insights.TooManyQueued):
        insights.insight_request(owner=user, kind=InsightKind.SHOT_NOTES, subject=shots[-2].pk,
                                 tier="prefetch")
    # ...and a request the user makes still goes through.
    asked = insights.insight_request(owner=user, kind=InsightKind.SHOT_NOTES,
                                     subject=shots[-1].pk)
    assert Job.objects.get(pk=asked.job_id).priority == conf.INTERACTIVE


def test_asking_again_for_a_waiting_insight_is_never_refused(shots, user, alice_client):
    for shot in shots[:conf.user_queued()]:
        assert ask(alice_client, shot).status_code == 202
    assert ask(alice_client, shots[0]).status_code == 202  # the same job, promoted or not
    assert ask(alice_client, shots[conf.user_queued()]).status_code == 429


def test_the_panel_says_why_it_refused(shots, alice_client):
    for shot in shots[:conf.user_queued()]:
        ask(alice_client, shot)
    response = alice_client.post("/insights/request/", {"kind": "shot_notes",
                                                        "subject": shots[-1].pk},
                                 HTTP_HX_REQUEST="true")
    assert response.status_code == 200  # htmx swaps no 4xx answer: the panel says it
    assert "waiting or being written" in response.content.decode()
