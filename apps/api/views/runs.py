from rest_framework import status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.jobs import selectors, services

from ..pagination import IdCursorPagination
from ..serializers.runs import RunDetailSerializer, RunFilterSerializer, RunSerializer
from .base import TenantViewSet
from .jobs import conflict


class RunViewSet(TenantViewSet):
    pagination_class = IdCursorPagination

    def run(self):
        return selectors.run_get(tenant=self.tenant, run_id=self.kwargs["pk"])

    def list(self, request):
        filters = RunFilterSerializer(data=request.query_params.dict())
        filters.is_valid(raise_exception=True)
        page = self.paginate_queryset(filters.apply(selectors.run_list(tenant=self.tenant)))
        return self.get_paginated_response(RunSerializer(page, many=True).data)

    def retrieve(self, request, pk=None):
        return Response(RunDetailSerializer(self.run()).data)

    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        try:
            run = services.run_cancel(run=self.run())
        except services.JobActionError as error:
            return conflict(error)
        return Response(RunSerializer(run).data)

    @action(detail=True, methods=["post"])
    def replay(self, request, pk=None):
        try:
            run = services.run_replay(run=self.run())
        except services.JobActionError as error:
            return conflict(error)
        return Response(RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)

    @action(detail=False, methods=["post"], url_path="replay")
    def replay_many(self, request):
        """Replay every failed run matching the filter (the dead-letter queue, or a slice of it)."""
        filters = RunFilterSerializer(data=request.data)
        filters.is_valid(raise_exception=True)
        replayed = services.runs_replay_failed(runs=filters.apply(selectors.run_list(tenant=self.tenant)))
        return Response({"replayed": replayed}, status=status.HTTP_202_ACCEPTED)
