"""A Cloud Quotas API (CloudQuotas) on 127.0.0.1, built from the client's own protos: it
lists a project's QuotaInfos for a service page by page and gets one by name, shaped as the
real API sends them (a per-region quota: one DimensionsInfo without a region, the default,
and one for each region whose value differs)."""

from __future__ import annotations

import grpc
from google.cloud import cloudquotas_v1

from launch.targets.vertex import hardware, quota
from tests.fakes.grpc_server import GrpcFake, unary

DEFAULT_LIMIT = 64  # a project with room for every test job, unless a test says otherwise


def every_metric() -> list[str]:
    """Every metric the catalogue names, on-demand and preemptible."""
    facts = quota.facts()
    names = [*facts["cpus"].values(), *facts["accelerators"].values(),
             *facts["tpu_generations"].values()]
    return [quota.metric(name, preemptible) for name in dict.fromkeys(names)
            for preemptible in (False, True)]


class FakeCloudQuotas(GrpcFake):
    SERVICE = "google.api.cloudquotas.v1.CloudQuotas"

    def __init__(self, page_size: int = 4) -> None:
        self.defaults = dict.fromkeys(every_metric(), DEFAULT_LIMIT)  # metric -> limit
        self.regional: dict[tuple[str, str], int] = {}  # (metric, region) -> limit
        self.page_size = page_size
        self.requests: list = []
        self.deny = False  # PERMISSION_DENIED, as for an account without cloudquotas.quotas.get
        super().__init__()

    def set_limit(self, metric: str, region: str, limit: int) -> None:
        self.regional[metric, region] = limit

    def handlers(self) -> dict:
        return {"ListQuotaInfos": unary(self.list, cloudquotas_v1.ListQuotaInfosRequest,
                                        cloudquotas_v1.ListQuotaInfosResponse.serialize),
                "GetQuotaInfo": unary(self.get, cloudquotas_v1.GetQuotaInfoRequest,
                                      cloudquotas_v1.QuotaInfo.serialize)}

    def _infos(self, parent: str) -> list[cloudquotas_v1.QuotaInfo]:
        service = parent.rsplit("/", 1)[-1]
        if service != quota.facts()["service"]:
            return []
        regions = hardware.regions()
        infos = []
        for metric, default in self.defaults.items():
            quota_id = "".join(part.title() for part in metric.split("_")) + "PerProjectPerRegion"
            dimensions = [cloudquotas_v1.DimensionsInfo(
                details=cloudquotas_v1.QuotaDetails(value=default),
                applicable_locations=regions)]
            dimensions += [cloudquotas_v1.DimensionsInfo(
                dimensions={"region": region},
                details=cloudquotas_v1.QuotaDetails(value=limit), applicable_locations=[region])
                for (named, region), limit in self.regional.items() if named == metric]
            infos.append(cloudquotas_v1.QuotaInfo(
                name=f"{parent}/quotaInfos/{quota_id}", quota_id=quota_id,
                metric=f"{service}/{metric}", service=service, dimensions=["region"],
                container_type=cloudquotas_v1.QuotaInfo.ContainerType.PROJECT,
                metric_unit="1", dimensions_infos=dimensions))
        return infos

    def list(self, request, context):
        self.requests.append(request)
        if self.deny:
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          "Permission 'cloudquotas.quotas.get' denied on resource")
        infos = self._infos(request.parent)
        start = int(request.page_token or 0)
        end = start + (request.page_size or self.page_size)
        return cloudquotas_v1.ListQuotaInfosResponse(
            quota_infos=infos[start:end], next_page_token=str(end) if end < len(infos) else "")

    def get(self, request, context):
        self.requests.append(request)
        parent = request.name.rsplit("/quotaInfos/", 1)[0]
        for info in self._infos(parent):
            if info.name == request.name:
                return info
        context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")

    def client(self) -> cloudquotas_v1.CloudQuotasClient:
        from google.cloud.cloudquotas_v1.services.cloud_quotas.transports import (
            CloudQuotasGrpcTransport,
        )

        return cloudquotas_v1.CloudQuotasClient(
            transport=CloudQuotasGrpcTransport(channel=self.channel()))
