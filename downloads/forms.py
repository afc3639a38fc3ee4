from django import forms
from django.utils.translation import gettext_lazy as _

from downloads.addresses import validate_url
from downloads.models import Format

MAX_EDIT_S = 30 * 86400  # no video is longer than a month


class DownloadForm(forms.Form):
    url = forms.CharField(
        label=_("Video address"), strip=True,
        widget=forms.URLInput(attrs={"placeholder": "https://…", "autocomplete": "off",
                                     "size": 60}))
    format = forms.ChoiceField(label=_("Format"), choices=Format.choices, initial=Format.BEST)
    name = forms.CharField(label=_("Name (optional)"), required=False, max_length=200)

    def clean_url(self):
        return validate_url(self.cleaned_data["url"])


class EditForm(forms.Form):
    OPS = [("trim", _("Cut a part")), ("audio", _("Extract the audio"))]

    op = forms.ChoiceField(label=_("Edit"), choices=OPS, initial="trim")
    # Bounded so an edit's spec fits its column ("trim:1e300-..." would not).
    start_s = forms.FloatField(label=_("From (seconds)"), required=False, min_value=0,
                               max_value=MAX_EDIT_S)
    end_s = forms.FloatField(label=_("To (seconds)"), required=False, min_value=0,
                             max_value=MAX_EDIT_S)

    def clean(self):
        data = super().clean()
        if data.get("op") == "trim":
            start_s, end_s = data.get("start_s"), data.get("end_s")
            if start_s is None or end_s is None:
                raise forms.ValidationError(_("Give the start and the end of the cut."))
            if end_s <= start_s:
                raise forms.ValidationError(_("The end must come after the start."))
        return data

    def edit(self):
        from downloads.edits import Edit

        data = self.cleaned_data
        if data["op"] == "audio":
            return Edit("audio")
        return Edit.trim(data["start_s"], data["end_s"])
