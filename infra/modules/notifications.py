"""Word when something happens: an email channel per configured address, an alert policy on
Vertex AI custom jobs that fail or are cancelled, and the Pub/Sub topic the launcher publishes
job events to (launch/targets/vertex/notify.py), with who may publish to it as data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cdktn_provider_google.monitoring_alert_policy import (
    MonitoringAlertPolicy,
    MonitoringAlertPolicyAlertStrategy,
    MonitoringAlertPolicyAlertStrategyNotificationRateLimit,
    MonitoringAlertPolicyConditions,
    MonitoringAlertPolicyConditionsConditionMatchedLog,
    MonitoringAlertPolicyDocumentation,
)
from cdktn_provider_google.monitoring_notification_channel import (
    MonitoringNotificationChannel,
)
from cdktn_provider_google.pubsub_topic import PubsubTopic
from cdktn_provider_google.pubsub_topic_iam_member import PubsubTopicIamMember
from constructs import Construct

from infra import names
from infra.modules.iam import Grant, checked

# The log entries of a custom job that failed or was cancelled: Vertex AI's own `service` line
# "Job failed." under the job's resource type (infra/names.py, where the log reader's type
# comes from too), or the Admin Activity audit entry of a `customJobs.cancel`
# (https://docs.cloud.google.com/vertex-ai/docs/general/audit-logging, read 2026-11-24).
# Custom jobs have no state metric (their metrics are CPU, memory, accelerator and network
# use: https://cloud.google.com/vertex-ai/docs/general/monitoring-metrics, read 2026-11-28);
# the launcher's own messages (the Pub/Sub topic below) say how every job ended.
CANCEL_METHOD = "google.cloud.aiplatform.v1.JobService.CancelCustomJob"
JOB_FAILURES_FILTER = (
    f'(resource.type="{names.JOB_LOG_RESOURCE}" AND '
    f'resource.labels.task_name="{names.JOB_SERVICE_TASK}" AND "{names.JOB_FAILED_TEXT}") '
    f'OR protoPayload.methodName="{CANCEL_METHOD}"')
# Log-match conditions need a notification rate limit (AlertStrategy.notificationRateLimit:
# "Required for alert policies with a LogMatch condition", the Monitoring API reference, read
# 2026-11-24); auto-close ends the incident a day later.
RATE_LIMIT = "300s"
AUTO_CLOSE = "86400s"
# Messages kept a week for a subscriber created late or down for a while.
TOPIC_RETENTION = "604800s"


class JobNotifications(Construct):
    def __init__(self, scope: Construct, id_: str, *, project: str, topic_name: str,
                 emails: Sequence[str], labels: Mapping[str, str],
                 iam: Sequence[Grant]) -> None:
        """`emails`: who Cloud Monitoring writes to; `iam`: the grants on the topic."""
        super().__init__(scope, id_)
        self.channels = [
            MonitoringNotificationChannel(
                self, f"email-{names.channel_key(email)}", project=project, type="email",
                display_name=f"job alerts: {email}", labels={"email_address": email},
                user_labels=dict(labels))
            for email in emails]
        self.policy = MonitoringAlertPolicy(
            self, "job-failures", project=project, combiner="OR",
            display_name="Vertex AI custom job failed or cancelled",
            conditions=[MonitoringAlertPolicyConditions(
                display_name="a custom job failed or was cancelled",
                condition_matched_log=MonitoringAlertPolicyConditionsConditionMatchedLog(
                    filter=JOB_FAILURES_FILTER))],
            alert_strategy=MonitoringAlertPolicyAlertStrategy(
                auto_close=AUTO_CLOSE,
                notification_rate_limit=MonitoringAlertPolicyAlertStrategyNotificationRateLimit(
                    period=RATE_LIMIT)),
            documentation=MonitoringAlertPolicyDocumentation(
                mime_type="text/markdown", subject="A training job failed or was cancelled",
                content="`invoke jobs.list` shows the job; `invoke jobs.status --job ID` "
                        "prints its cause and fix from the failing replica's log."),
            notification_channels=[channel.id for channel in self.channels],
            user_labels=dict(labels))
        self.topic = PubsubTopic(self, "topic", project=project, name=topic_name,
                                 labels=dict(labels),
                                 message_retention_duration=TOPIC_RETENTION)
        self.iam_members = [
            PubsubTopicIamMember(self, grant.logical_id, project=project,
                                 topic=self.topic.name, role=grant.role, member=grant.member)
            for grant in checked(iam)]
