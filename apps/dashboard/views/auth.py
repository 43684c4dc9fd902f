"""Sign up, log in, log out, password reset (Django's auth views with our templates)."""

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.forms.utils import ErrorDict
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.views.decorators.debug import sensitive_post_parameters

from apps.tenants import quotas
from apps.tenants.accounts import account_signup

from ..access import SESSION_TENANT_KEY
from ..forms.accounts import LoginForm, SignupForm


@sensitive_post_parameters("password")
def signup(request):
    if request.user.is_authenticated:
        return redirect("dashboard:overview")
    form = SignupForm(request.POST or None)
    if request.method == "POST":
        # Counted before the form is looked at, like the login form (ThrottledFormMixin).
        decision = quotas.take_signup(address=quotas.client_address(request.META))
        if not decision.allowed:
            form._errors, form.cleaned_data = ErrorDict(), {}  # not validated; what was typed stays
            form.add_error(None, f"Too many sign-ups from your address. Try again in "
                                 f"{max(1, -(-decision.retry_after_seconds // 60))} minute(s).")  # fmt: skip
            response = render(request, "dashboard/auth/signup.html", {"form": form}, status=429)
            response["Retry-After"] = str(decision.retry_after_seconds)
            return response
    if request.method == "POST" and form.is_valid():
        membership = account_signup(**form.cleaned_data)
        login(request, membership.user, backend="django.contrib.auth.backends.ModelBackend")
        request.session[SESSION_TENANT_KEY] = str(membership.tenant_id)
        messages.success(request, f"Welcome to Chime. Your tenant '{membership.tenant.name}' is ready.")
        return redirect("dashboard:overview")
    return render(request, "dashboard/auth/signup.html", {"form": form})


class ThrottledFormMixin:
    """Counts every POST against the account named and the client address before the form is
    looked at (apps/tenants/quotas.py); over either limit, the form comes back with an error and
    HTTP 429 + Retry-After, the same whether the account exists or not, and the password is never
    checked (a guess past the limit learns nothing)."""

    throttle_field = ""
    refusal = "Too many attempts. Try again in {minutes} minute(s)."

    def take(self, *, account: str, address: str):
        raise NotImplementedError

    def post(self, request, *args, **kwargs):
        account = request.POST.get(self.throttle_field, "")
        decision = self.take(account=account, address=quotas.client_address(request.META))
        if decision.allowed:
            return super().post(request, *args, **kwargs)
        form = self.get_form()
        # Not validated: the login form's validation checks the password.
        form._errors, form.cleaned_data = ErrorDict(), {}
        form.add_error(None, self.refusal.format(minutes=max(1, -(-decision.retry_after_seconds // 60))))
        response = self.render_to_response(self.get_context_data(form=form), status=429)
        response["Retry-After"] = str(decision.retry_after_seconds)
        return response


class LoginView(ThrottledFormMixin, auth_views.LoginView):
    throttle_field = "username"

    def take(self, *, account, address):
        return quotas.take_login_attempt(username=account, address=address)


class PasswordResetView(ThrottledFormMixin, auth_views.PasswordResetView):
    throttle_field = "email"
    refusal = "Too many password reset requests. Try again in {minutes} minute(s)."

    def take(self, *, account, address):
        return quotas.take_password_reset(email=account, address=address)


login_view = LoginView.as_view(
    template_name="dashboard/auth/login.html", authentication_form=LoginForm, redirect_authenticated_user=True
)
logout_view = auth_views.LogoutView.as_view()  # POST only (Django 5); goes to LOGOUT_REDIRECT_URL

password_reset = PasswordResetView.as_view(
    template_name="dashboard/auth/password_reset.html",
    email_template_name="dashboard/auth/password_reset_email.txt",
    subject_template_name="dashboard/auth/password_reset_subject.txt",
    success_url=reverse_lazy("dashboard:password_reset_done"),
)
password_reset_done = auth_views.PasswordResetDoneView.as_view(template_name="dashboard/auth/password_reset_done.html")
password_reset_confirm = auth_views.PasswordResetConfirmView.as_view(
    template_name="dashboard/auth/password_reset_confirm.html",
    success_url=reverse_lazy("dashboard:password_reset_complete"),
)
password_reset_complete = auth_views.PasswordResetCompleteView.as_view(
    template_name="dashboard/auth/password_reset_complete.html"
)
