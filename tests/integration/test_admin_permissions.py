"""Every staff permission grants exactly what its name says.

The walk: every action a registered ModelAdmin offers a superuser, and every page of its own,
declares the permission it needs. Staff are offered an action only with it, for each
permission of every registered model in turn (alone, and beside view permissions for
everything). Posted for real, an action or a page is refused, and changes nothing, for staff
holding each permission of its model alone, view permissions only, or every permission of
every model but the ones granting it.

Then what the walk cannot see: the function a schedule calls, a token's owner and revocation,
and the links no change form may re-point.
"""

import logging
import multiprocessing
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.admin import ActionLocation
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.contrib.messages import get_messages
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext
from django_q.brokers import get_broker
from django_q.models import Failure, OrmQ, Schedule, Success, Task
from django_q.monitor import monitor
from django_q.scheduler import scheduler
from django_q.signing import SignedPackage
from django_q.tasks import async_task
from django_q.worker import worker

import tests.scheduled  # noqa: F401 - registers the functions the samples' tasks call
from core.models import ApiToken, hash_token
from downloads import services as downloads
from downloads.models import Download, DownloadQuota, MediaAsset, url_digest
from insights.models import Insight, InsightKind
from jobs import schedules, services
from jobs.admin import jobs as jobs_admin
from jobs.models import ConcurrencyLimit, Job, JobStatus, Queue, RateLimit, Worker
from subscriptions import services as subscriptions
from subscriptions.models import Entry

pytestmark = pytest.mark.usefixtures("media_root")

STANDARD = ("view", "add", "change", "delete")
# Posted with every refused action: whatever confirmation an action asks for, given, so a
# refusal is the only thing that can stop it.
CONFIRMED = {"post": "yes", "confirm": "yes", "reason": "probe", "priority": "50"}


# --- What every registered model has, to act on ---------------------------------------------


def _jobs(user):
    ready = [services.enqueue("tests.noop", {}) for _ in range(2)]
    failed, paused = services.enqueue("tests.noop", {}), services.enqueue("tests.noop", {})
    Job.objects.filter(pk=failed.pk).update(status=JobStatus.FAILED, finished_at=timezone.now())
    Job.objects.filter(pk=paused.pk).update(status=JobStatus.PAUSED)
    return list(Job.objects.filter(pk__in=[job.pk for job in (*ready, failed, paused)]))


def _tasks(success):
    def make(user):
        now = timezone.now()
        return [Task.objects.create(id=uuid.uuid4().hex, name=f"sample-{success}", group="sample",
                                    func="tests.scheduled.note", args=("sample",), kwargs={},
                                    started=now, stopped=now, success=success)]

    return make


def _queued_task(user):
    async_task("tests.scheduled.note", "queued")  # on the ORM broker: an OrmQ row
    return list(OrmQ.objects.all())


def _asset(user):
    url = "https://videos.example.com/ready.mp4"
    return [MediaAsset.objects.create(url=url, url_digest=url_digest(url), format="best",
                                      state=MediaAsset.State.READY, ready_at=timezone.now())]


def _downloads(user):
    live = downloads.download_submit(owner=user, url="https://videos.example.com/live.mp4")
    cancelled = downloads.download_submit(owner=user, url="https://videos.example.com/gone.mp4")
    downloads.download_cancel(cancelled)
    return [live, cancelled]


def _subscriptions(user):
    running, paused = (subscriptions.subscribe(user, f"https://example.com/{name}", interval_s=3600)
                       for name in ("running", "paused"))
    subscriptions.pause(paused)
    return [running, paused]


def _entry(user):
    subscription = subscriptions.subscribe(user, "https://example.com/listed", interval_s=3600)
    return [Entry.objects.create(subscription=subscription, key="k" * 64,
                                 url="https://example.com/listed/1")]


SAMPLES = {
    "auth.user": lambda user: [get_user_model().objects.create_user("sample-user")],
    "auth.group": lambda user: [Group.objects.create(name="sample")],
    "jobs.job": _jobs,
    "jobs.worker": lambda user: [Worker.objects.create(name="w", host="h", pid=1,
                                                       queues=["default"], kinds=["tests.noop"])],
    "jobs.queue": lambda user: [Queue.objects.update_or_create(name="default")[0]],
    "jobs.concurrencylimit": lambda user: [ConcurrencyLimit.objects.create(key="user:1", limit=2)],
    "jobs.ratelimit": lambda user: [RateLimit.objects.create(key="sample", limit=1,
                                                             period_seconds=60)],
    "django_q.schedule": lambda user: [Schedule.objects.create(
        name="sample", func="jobs.scheduled.prune_history", schedule_type=Schedule.DAILY,
        next_run=timezone.now() + timedelta(hours=1))],
    "django_q.success": _tasks(True),
    "django_q.failure": _tasks(False),
    "django_q.ormq": _queued_task,
    "downloads.mediaasset": _asset,
    "downloads.download": _downloads,
    "downloads.downloadquota": lambda user: [DownloadQuota.objects.create(user=user)],
    "subscriptions.subscription": _subscriptions,
    "subscriptions.entry": _entry,
    "insights.insight": lambda user: [Insight.objects.create(
        owner=user, kind=InsightKind.LIBRARY_OVERVIEW, subject="library")],
    "core.apitoken": lambda user: [ApiToken.issue(user=user)[0]],
}


def registered():
    return sorted(admin.site._registry.items(), key=lambda item: item[0]._meta.label)


@pytest.fixture
def samples(user):
    missing = [model._meta.label_lower for model, _ in registered()
               if model._meta.label_lower not in SAMPLES]
    assert not missing, f"add a sample of {missing} to SAMPLES, so their actions are walked"
    return {label: make(user) for label, make in SAMPLES.items()
            if label in {model._meta.label_lower for model, _ in registered()}}


def snapshot():
    """Every row of every registered model: what no refused request may change."""
    return {model._meta.label: list(model._base_manager.order_by("pk").values())
            for model, _ in registered()}


# --- Who holds what ---------------------------------------------------------------------------


def name_of(permission):
    return f"{permission.content_type.app_label}.{permission.codename}"


@pytest.fixture
def permissions(db):
    """{model: its permissions} for every registered model (a proxy has its own)."""
    types = {model: ContentType.objects.get_for_model(model, for_concrete_model=False)
             for model, _ in registered()}
    rows = Permission.objects.select_related("content_type").filter(content_type__in=types.values())
    return {model: [p for p in rows if p.content_type_id == kind.pk] for model, kind in types.items()}


@dataclass
class Probe:
    """A staff user holding `held` (permission names), and a browser logged in as them."""

    user: object
    held: frozenset
    client: Client = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        self.client = Client()
        self.client.force_login(self.user)  # before any snapshot: logging in writes last_login


class Staff:
    """Staff users holding given permissions, made once per set."""

    def __init__(self, permissions):
        self.every = [p for held in permissions.values() for p in held]
        self.views = [p for p in self.every if p.codename.startswith("view_")]
        self.made = {}

    def holding(self, *permissions):
        key = frozenset(permissions)
        if key not in self.made:
            user = get_user_model().objects.create(username=f"staff-{len(self.made)}", is_staff=True)
            user.user_permissions.add(*key)
            self.made[key] = Probe(user, frozenset(name_of(p) for p in key))
        return self.made[key]

    def alone(self, permissions):
        return [self.holding(permission) for permission in permissions]

    def beside_views(self, permissions):
        return [self.holding(*{*self.views, permission}) for permission in permissions]

    def named(self, names):
        return [p for p in self.every if name_of(p) in names]

    def all_but(self, names):
        """Every permission of every model at once, except `names`: refused with all of them,
        staff are refused with each one alone (holding more never grants less)."""
        return self.holding(*(p for p in self.every if name_of(p) not in names))


@pytest.fixture
def staff(permissions):
    return Staff(permissions)


@pytest.fixture
def superuser(staff_user):
    return staff_user


def granting(model, declared):
    """The permissions that grant what `declared` names on `model`'s admin: Django's own (view
    also by change, as Django has it), or a custom `can_<name>` of the model's app."""
    opts = model._meta
    if declared in STANDARD:
        names = ("view", "change") if declared == "view" else (declared,)
        return {f"{opts.app_label}.{name}_{opts.model_name}" for name in names}
    return {f"{opts.app_label}.can_{declared}"}


# --- Actions ------------------------------------------------------------------------------------


def actions_of(model_admin, user):
    """(location, name, function) of every action `model_admin` offers `user`."""
    request = RequestFactory().get("/")
    request.user = user
    return [(location, name, action.func) for location in ActionLocation
            for name, action in model_admin.get_actions(request, action_location=location).items()]


def post_action(client, model, location, name, objects, data=None):
    opts = model._meta
    pks = [str(obj.pk) for obj in objects]
    if location == ActionLocation.CHANGE_LIST:
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        posted = {"action": name, ACTION_CHECKBOX_NAME: pks, "index": "0"}
    else:
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[pks[0]])
        posted = {f"{location.value}-action": name, ACTION_CHECKBOX_NAME: pks[:1]}
    client.cookies.pop("messages", None)  # left by an earlier redirect nobody followed
    return client.post(url, {**posted, **(data or {})})


def acted(response):
    """Whether the admin ran the posted action (a refusal is a 403, Django's "No action selected."
    or, for a user offered no action at all, the list again)."""
    if response.status_code == 403:
        return False
    if response.status_code == 302:
        said = [str(message) for message in get_messages(response.wsgi_request)]
        return gettext("No action selected.") not in said
    assert response.status_code == 200, response.status_code
    return not any(t.name and t.name.endswith("change_list.html") for t in response.templates)


def may_act(model, declared, held):
    """Django offers an action to whoever holds any one of its declared permissions."""
    return any(granting(model, name) & held for name in declared)


def may_post(model, declared, held):
    return bool(granting(model, "view") & held) and may_act(model, declared, held)


def test_every_action_and_page_declares_the_permission_it_needs(superuser, permissions):
    every = {name_of(p) for held in permissions.values() for p in held}
    problems = []
    for model, model_admin in registered():
        for _location, name, func in actions_of(model_admin, superuser):
            declared = getattr(func, "allowed_permissions", ())
            if not declared:
                problems.append(f"{model._meta.label}: the action {name} declares no permission")
            for permission in declared:
                if not granting(model, permission) <= every:
                    problems.append(f"{model._meta.label}: the action {name} declares "
                                    f"{permission!r}, which no permission grants")
        for page in own_pages(model_admin):
            if page not in PAGES_BY_NAME:
                problems.append(f"{model._meta.label}: the page {page} is not in PAGES: say what "
                                "it needs")
    assert not problems, "\n".join(problems)


def test_an_action_is_offered_only_with_a_permission_it_declares(superuser, staff):
    walked = [(model, model_admin, actions_of(model_admin, superuser))
              for model, model_admin in registered()]
    mismatches = []
    for probe in [staff.holding(*staff.views), *staff.alone(staff.every),
                  *staff.beside_views(staff.every)]:
        for model, model_admin, actions in walked:
            offered = {(location, name) for location, name, _func in actions_of(model_admin, probe.user)}
            for location, name, func in actions:
                if ((location, name) in offered) != may_act(model, func.allowed_permissions, probe.held):
                    mismatches.append(f"{model._meta.label} {name} for {sorted(probe.held)}: "
                                      f"offered={(location, name) in offered}")
    assert not mismatches, "\n".join(mismatches[:50])


@pytest.mark.slow
def test_an_action_posted_without_its_permission_changes_nothing(superuser, staff, permissions,
                                                                 samples):
    allowed, mismatches = [], []
    for model, model_admin in registered():
        objects = samples[model._meta.label_lower]
        for location, name, func in actions_of(model_admin, superuser):
            declared = func.allowed_permissions
            granted = set().union(*(granting(model, each) for each in declared))
            # Each permission of the model alone; every permission of every model but the
            # granting ones; and each granting one beside every view. Every single permission
            # beside the views is asked above, without posting.
            probes = [*staff.alone(permissions[model]), staff.all_but(granted),
                      *staff.beside_views(staff.named(granted))]
            before = snapshot()
            for probe in probes:
                if may_post(model, declared, probe.held):
                    allowed.append((probe, model, location, name, objects))
                elif acted(post_action(probe.client, model, location, name, objects, CONFIRMED)):
                    mismatches.append(f"{model._meta.label} {name} ran for {sorted(probe.held)}")
            if snapshot() != before:
                mismatches.append(f"{model._meta.label} {name} changed rows for who may not")
    # Then for who may, without confirming: they change what the refusals were tried on.
    for probe, model, location, name, objects in allowed:
        if not acted(post_action(probe.client, model, location, name, objects)):
            mismatches.append(f"{model._meta.label} {name} was refused to {sorted(probe.held)}")
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.slow
def test_view_only_staff_can_act_on_nothing(superuser, staff, samples):
    viewer = staff.holding(*staff.views).client
    for model, model_admin in registered():
        for location, name, _func in actions_of(model_admin, superuser):
            before = snapshot()
            response = post_action(viewer, model, location, name, samples[model._meta.label_lower],
                                   CONFIRMED)
            assert not acted(response), (model._meta.label, name)
            assert snapshot() == before, (model._meta.label, name)
        for page in own_pages(model_admin):
            for spec in PAGES_BY_NAME[page]:
                if spec.method == "POST":
                    before = snapshot()
                    assert spec.request(viewer, samples).status_code == 403, page
                    assert snapshot() == before, page


# --- The admin's own pages ------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One of an admin's own pages: how to ask for it, and what it needs (one permission granting
    each name)."""

    name: str
    needs: tuple
    method: str = "GET"
    args: Callable = lambda samples: []
    data: dict = field(default_factory=dict)

    def request(self, client, samples):
        url = reverse(f"admin:{self.name}", args=self.args(samples))
        return client.post(url, self.data) if self.method == "POST" else client.get(url)

    def allows(self, model, held):
        return all(granting(model, name) & held for name in self.needs)


def _job_in(samples, legal):
    return next(job.pk for job in samples["jobs.job"] if job.status in legal)


# A page not listed here fails the walk: a new one says what it needs.
PAGES = [
    Page("jobs_job_up_next", ("view",)),
    Page("jobs_job_queues", ("view",)),
    Page("jobs_job_workers", ("view",)),
    Page("jobs_job_dashboard", ("view",)),
    Page("jobs_job_queue_operation", ("manage_queues",), "POST", lambda s: ["default", "pause"]),
    Page("jobs_job_worker_command", ("manage_workers",), "POST",
         lambda s: [s["jobs.worker"][0].pk, "stop"]),
    Page("jobs_job_retry_failed", ("view", "retry"), "POST",
         data={"count": "100", "up_to": "1000000000"}),
    Page("jobs_job_cancel_matching", ("view", "cancel"), "POST",
         data={"count": "100", "up_to": "1000000000"}),
    *(Page("jobs_job_act", (action.permission.removeprefix("can_"),), "POST",
           lambda s, action=action: [_job_in(s, action.legal), action.name], CONFIRMED)
      for action in jobs_admin.ACTIONS.values()),
    Page("auth_user_password_change", ("change",), "POST", lambda s: [s["auth.user"][0].pk],
         {"password1": "Probe-pass-2719!", "password2": "Probe-pass-2719!",
          "usable_password": "true"}),
]
PAGES_BY_NAME = {}
for _page in PAGES:
    PAGES_BY_NAME.setdefault(_page.name, []).append(_page)


def own_pages(model_admin):
    """The names of the URLs a ModelAdmin adds to Django's own (list, add, change, ...)."""
    def names(urls):
        return {url.name or str(url.pattern) for url in urls}

    return sorted(names(model_admin.get_urls())
                  - names(admin.ModelAdmin(model_admin.model, admin.site).get_urls()))


@pytest.mark.slow
def test_a_page_answers_only_with_the_permissions_it_needs(staff, permissions, samples):
    mismatches = []
    for model, model_admin in registered():
        for spec in (spec for page in own_pages(model_admin) for spec in PAGES_BY_NAME[page]):
            # Staff holding nothing, every view, each permission of the page's model alone (and
            # beside every view, if those alone are refused: more never grants less), and every
            # permission of every model but those granting one of its needs.
            views = staff.holding(*staff.views)
            probes = [staff.holding(), views, *staff.alone(permissions[model]),
                      *(staff.all_but(granting(model, need)) for need in spec.needs)]
            if not spec.allows(model, views.held):
                probes += staff.beside_views(permissions[model])
            refused = [probe for probe in probes if not spec.allows(model, probe.held)]
            before = snapshot()
            for probe in refused:
                if (status := spec.request(probe.client, samples).status_code) != 403:
                    mismatches.append(f"{spec.name} {spec.args(samples)}: {status} for "
                                      f"{sorted(probe.held)}")
            if spec.method == "POST" and snapshot() != before:
                mismatches.append(f"{spec.name} {spec.args(samples)} changed rows for who may not")
            for probe in (probe for probe in probes if probe not in refused):
                if spec.request(probe.client, samples).status_code == 403:
                    mismatches.append(f"{spec.name} {spec.args(samples)}: 403 for "
                                      f"{sorted(probe.held)}")
    assert not mismatches, "\n".join(mismatches[:50])


# --- What a schedule calls ----------------------------------------------------------------------


def schedule_form(client, url, **changes):
    """The schedule form's values as a browser posts them, with `changes`."""
    form = client.get(url).context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    next_run = timezone.localtime(timezone.now() + timedelta(hours=1))
    data.update(next_run_0=next_run.strftime("%Y-%m-%d"), next_run_1=next_run.strftime("%H:%M:%S"))
    return {**data, **changes}


SHELL = "subprocess.check_call"


def test_staff_who_may_edit_schedules_choose_only_registered_functions(staff, permissions):
    client = staff.holding(*permissions[Schedule]).client
    add = reverse("admin:django_q_schedule_add")
    page = client.get(add).content.decode()
    assert '<option value="downloads.scheduled.housekeeping">' in page
    assert not any(f'name="{name}"' in page for name in ("args", "kwargs", "hook"))

    response = client.post(add, schedule_form(client, add, name="shell", func=SHELL,
                                              args="['touch', '/tmp/x']"))
    assert response.status_code == 200 and "func" in response.context["adminform"].form.errors
    assert not Schedule.objects.filter(name="shell").exists()

    prune = Schedule.objects.create(name="Prune job history", func="jobs.scheduled.prune_history",
                                    schedule_type=Schedule.DAILY, next_run=timezone.now())
    change = reverse("admin:django_q_schedule_change", args=[prune.pk])
    assert client.post(change, schedule_form(client, change, func=SHELL)).status_code == 200
    prune.refresh_from_db()
    assert prune.func == "jobs.scheduled.prune_history"

    # What they post for the call itself is not theirs to set: the schedule calls without it.
    response = client.post(add, schedule_form(client, add, name="hourly",
                                              func="downloads.scheduled.housekeeping",
                                              args="['touch', '/tmp/x']", hook=SHELL))
    assert response.status_code == 302
    hourly = Schedule.objects.get(name="hourly")
    assert (hourly.func, hourly.args, hourly.hook) == ("downloads.scheduled.housekeeping", None, None)

    # A row written straight to the database is listed as one that never runs.
    Schedule.objects.create(name="planted", func=SHELL, next_run=timezone.now())
    listing = client.get(reverse("admin:django_q_schedule_changelist")).content.decode()
    assert listing.count("not registered: never runs") == 1


@pytest.mark.parametrize(("field", "value", "says"), [
    ("args", "'x'", "does not take these arguments"),
    ("kwargs", "{'q_options': {'hook': 'os.system'}}", "q_options"),
    ("kwargs", "1", "dict literal"),
    ("args", "(", "Python literal"),
    ("hook", SHELL, "Select a valid choice"),
    ("hook", "jobs.scheduled.prune_history", "does not take these arguments"),  # not the task
])
def test_a_superuser_sets_only_arguments_the_function_takes(client, superuser, field, value, says):
    client.force_login(superuser)
    add = reverse("admin:django_q_schedule_add")
    response = client.post(add, schedule_form(client, add, name="bad",
                                              func="jobs.scheduled.prune_history", **{field: value}))
    assert response.status_code == 200 and says in response.content.decode()
    assert not Schedule.objects.filter(name="bad").exists()

    response = client.post(add, schedule_form(client, add, name="good", func="tests.scheduled.note",
                                              args="'a'"))
    assert response.status_code == 302
    assert Schedule.objects.get(name="good").args == "'a'"


def fire_due_schedules():
    """What a cluster does with due schedules, here: django-q2's scheduler queues their firings on
    the ORM broker, its worker runs each and its monitor records how it went."""
    broker = get_broker()
    scheduler(broker=broker)
    tasks, results = multiprocessing.Queue(), multiprocessing.Queue()
    for _ in range(broker.queue_size()):
        for ack_id, package in broker.dequeue():
            tasks.put({**SignedPackage.loads(package), "ack_id": ack_id})
    tasks.put("STOP")
    worker(tasks, results, multiprocessing.Value("f", -1), timeout=None)
    results.put("STOP")
    monitor(results, broker)
    for queue in (tasks, results):
        queue.close()
        queue.join_thread()


@pytest.mark.django_db(transaction=True)  # django-q2's worker closes old connections
def test_the_scheduler_runs_no_function_that_is_not_registered(tmp_path, caplog):
    Schedule.objects.all().delete()
    ran = tmp_path / "ran"
    due = timezone.now() - timedelta(seconds=1)
    every_minute = {"schedule_type": Schedule.MINUTES, "minutes": 1, "next_run": due}
    # Rows no form accepts: written straight to the database.
    shell = Schedule.objects.create(name="shell", func=SHELL, args=repr(["touch", str(ran)]),
                                    **every_minute)
    Schedule.objects.create(name="hooked", func="tests.scheduled.note", args="'b'", hook=SHELL,
                            **every_minute)
    Schedule.objects.create(name="note", func="tests.scheduled.note", args="'a'", **every_minute)

    with caplog.at_level(logging.ERROR, logger="jobs.scheduler"):
        fire_due_schedules()

    assert not ran.exists()
    assert Success.objects.get(group="note").result == "fired a"  # the others fire as ever
    for name in ("shell", "hooked"):
        failure = Failure.objects.get(group=name)
        assert failure.func == schedules.REFUSED
        assert f"'{SHELL}' is not a registered schedule function" in failure.result
        assert f"for {name}: {SHELL} is not a registered schedule function" in caplog.text
    shell.refresh_from_db()
    assert shell.next_run > due  # passed over this period, refused again the next


def test_a_task_whose_function_is_not_registered_is_not_resubmitted(client, superuser):
    now = timezone.now()
    planted = Task.objects.create(id=uuid.uuid4().hex, name="planted", group="shell", func=SHELL,
                                  args=(["touch", "/tmp/x"],), kwargs={}, started=now, stopped=now,
                                  success=False)
    client.force_login(superuser)
    page = client.post(reverse("admin:django_q_failure_changelist"), {
        "action": "resubmit", ACTION_CHECKBOX_NAME: [planted.pk], "index": "0"}, follow=True)
    assert "1 not resubmitted: their function is not registered." in page.content.decode()
    assert not OrmQ.objects.exists()


# --- Tokens ---------------------------------------------------------------------------------------


def api(raw):
    return Client().get("/api/downloads/", HTTP_AUTHORIZATION=f"Bearer {raw}")


def test_a_token_keeps_its_user_and_a_revoked_one_stays_revoked(staff, permissions, user,
                                                                other_user):
    client = staff.holding(*permissions[ApiToken]).client  # every token permission
    live, live_key = ApiToken.issue(user=user, name="script")
    revoked, revoked_key = ApiToken.issue(user=user, name="old")
    ApiToken.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())

    for token in (live, revoked):
        url = reverse("admin:core_apitoken_change", args=[token.pk])
        response = client.post(url, {"user": other_user.pk, "name": "renamed", "revoked_at_0": "",
                                     "revoked_at_1": ""})
        assert response.status_code == 302
        token.refresh_from_db()
        assert (token.user, token.name) == (user, "renamed")
    assert revoked.revoked_at is not None and api(revoked_key).status_code == 401

    # Revoking is an action of its own.
    assert api(live_key).status_code == 200
    client.post(reverse("admin:core_apitoken_changelist"),
                {"action": "revoke", ACTION_CHECKBOX_NAME: [live.pk], "index": "0"})
    assert api(live_key).status_code == 401


TOKEN = re.compile(r"hlg_[\w-]{43}")


def test_an_added_token_works_and_is_shown_once(staff, permissions, other_user, client, superuser):
    creator = staff.holding(*permissions[ApiToken])
    add = reverse("admin:core_apitoken_add")
    for name in ("first", "second"):
        # Theirs, whoever they name: a token for someone else would let them act as that user.
        page = creator.client.post(add, {"name": name, "user": other_user.pk}, follow=True)
        [key] = TOKEN.findall(page.content.decode())
        token = ApiToken.objects.get(name=name)
        assert token.user == creator.user and token.key_hash == hash_token(key)
        assert api(key).status_code == 200
    listing = creator.client.get(reverse("admin:core_apitoken_changelist")).content.decode()
    assert not TOKEN.search(listing)

    client.force_login(superuser)
    page = client.post(add, {"name": "for bob", "user": other_user.pk}, follow=True)
    [key] = TOKEN.findall(page.content.decode())
    assert ApiToken.objects.get(key_hash=hash_token(key)).user == other_user


# --- Links --------------------------------------------------------------------------------------

SITE_APPS = {"core", "jobs", "downloads", "insights", "subscriptions"}


def test_no_change_form_of_the_site_re_points_a_link(staff, samples):
    client = staff.holding(*staff.every).client  # every permission, short of a superuser
    for model, _admin in registered():
        if model._meta.app_label not in SITE_APPS:
            continue
        obj = samples[model._meta.label_lower][0]
        opts = model._meta
        form = client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_change",
                                  args=[obj.pk])).context["adminform"].form
        fields = {f.name: f for f in opts.get_fields()}
        links = [name for name in form.fields if name in fields and fields[name].is_relation]
        assert not links, (opts.label, links)


def test_a_download_keeps_its_owner_asset_and_job(staff, permissions, user, other_user):
    client = staff.holding(*permissions[Download]).client
    mine = downloads.download_submit(owner=user, url="https://videos.example.com/mine.mp4")
    theirs = downloads.download_submit(owner=other_user, url="https://videos.example.com/b.mp4")
    response = client.post(reverse("admin:downloads_download_change", args=[mine.pk]), {
        "owner": other_user.pk, "asset": theirs.asset_id, "job": theirs.job_id, "name": "renamed"})
    assert response.status_code == 302
    mine.refresh_from_db()
    assert (mine.owner, mine.asset_id, mine.job_id, mine.name) == (
        user, mine.asset_id, mine.job_id, "renamed")
    assert mine.asset_id != theirs.asset_id and mine.job_id != theirs.job_id
