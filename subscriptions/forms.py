from django import forms
from django.utils.translation import gettext_lazy as _

from downloads.addresses import validate_url
from downloads.models import Format
from subscriptions import intervals


class SubscriptionForm(forms.Form):
    url = forms.CharField(
        label=_("Playlist or channel address"), strip=True,
        widget=forms.URLInput(attrs={"placeholder": "https://…", "autocomplete": "off",
                                     "size": 60}))
    format = forms.ChoiceField(label=_("Format"), choices=Format.choices, initial=Format.BEST)
    interval_s = forms.TypedChoiceField(label=_("Check every"), coerce=int)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Read per form: the allowed intervals are settings.
        self.fields["interval_s"].choices = intervals.choices()
        self.fields["interval_s"].initial = intervals.initial()

    def clean_url(self):
        return validate_url(self.cleaned_data["url"])
