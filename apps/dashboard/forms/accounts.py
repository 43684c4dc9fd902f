from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.password_validation import validate_password

from apps.tenants.accounts import email_taken


class SignupForm(forms.Form):
    email = forms.EmailField(label="Email", max_length=150, widget=forms.EmailInput(attrs={"autocomplete": "email"}))
    password = forms.CharField(
        label="Password", strip=False, widget=forms.PasswordInput(attrs={"autocomplete": "new-password"})
    )
    tenant_name = forms.CharField(
        label="Organization name",
        max_length=200,
        help_text="Your tenant: jobs, runs and API keys belong to it. You can invite others later.",
    )

    def clean_email(self):
        email = self.cleaned_data["email"].strip().lower()
        if email_taken(email):
            raise forms.ValidationError("An account with this email exists already. Log in, or reset the password.")
        return email

    def clean(self):
        cleaned = super().clean()
        if "email" in cleaned and "password" in cleaned:
            user = get_user_model()(username=cleaned["email"], email=cleaned["email"])
            try:
                validate_password(cleaned["password"], user)
            except forms.ValidationError as error:
                self.add_error("password", error)
        return cleaned


class LoginForm(AuthenticationForm):
    username = forms.CharField(
        label="Email or username",
        max_length=150,
        widget=forms.TextInput(attrs={"autofocus": True, "autocomplete": "username"}),
    )

    def clean_username(self):
        username = self.cleaned_data["username"].strip()
        return username.lower() if "@" in username else username  # sign-up stores emails lower-cased


class ApiKeyForm(forms.Form):
    name = forms.CharField(
        label="Name", max_length=100, required=False, help_text="What uses this key, e.g. 'CI deploys'."
    )
