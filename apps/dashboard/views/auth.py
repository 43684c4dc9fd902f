"""Sign up, log in, log out, password reset (Django's auth views with our templates)."""

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.views.decorators.debug import sensitive_post_parameters

from apps.tenants.accounts import account_signup

from ..access import SESSION_TENANT_KEY
from ..forms.accounts import LoginForm, SignupForm


@sensitive_post_parameters("password")
def signup(request):
    if request.user.is_authenticated:
        return redirect("dashboard:overview")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        membership = account_signup(**form.cleaned_data)
        login(request, membership.user, backend="django.contrib.auth.backends.ModelBackend")
        request.session[SESSION_TENANT_KEY] = str(membership.tenant_id)
        messages.success(request, f"Welcome to Chime. Your tenant '{membership.tenant.name}' is ready.")
        return redirect("dashboard:overview")
    return render(request, "dashboard/auth/signup.html", {"form": form})


login_view = auth_views.LoginView.as_view(
    template_name="dashboard/auth/login.html", authentication_form=LoginForm, redirect_authenticated_user=True
)
logout_view = auth_views.LogoutView.as_view()  # POST only (Django 5); goes to LOGOUT_REDIRECT_URL

password_reset = auth_views.PasswordResetView.as_view(
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
