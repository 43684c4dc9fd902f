"""Dashboard page numbers (issue #11): a 20-digit page was a 500 (OFFSET past a bigint)."""

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/jobs/", "/runs/", "/dead-letters/"])
@pytest.mark.parametrize("page", ["99999999999999999999", "1001"])
def test_a_page_beyond_the_last_shown_is_a_400_that_says_so(owner_client, path, page):
    response = owner_client.get(f"{path}?page={page}")
    assert response.status_code == 400


@pytest.mark.parametrize("page", ["1000", "0", "-3", "abc", ""])
def test_other_page_numbers_render(owner_client, job, page):
    assert owner_client.get(f"/jobs/?page={page}").status_code == 200
