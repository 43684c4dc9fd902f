"""Django: a view decorator and a dedupe store in your database.

Add ``"chime_client.contrib.django"`` to ``INSTALLED_APPS`` and run ``migrate`` to use
:class:`DjangoStore` (one small table, ``chime_client_webhookreceipt``). The decorator itself
needs no app: import it from ``chime_client.contrib.django.views``.
"""
