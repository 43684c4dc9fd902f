from rest_framework.response import Response

from apps.jobs import selectors

from ..serializers.runs import RunDetailSerializer
from .base import TenantViewSet


class RunViewSet(TenantViewSet):
    def retrieve(self, request, pk=None):
        run = selectors.run_get(tenant=self.tenant, run_id=pk)
        return Response(RunDetailSerializer(run).data)
