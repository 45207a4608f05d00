"""The gRPC v2 endpoint (apache.rocketmq.v2.MessagingService) RocketMQ 5.x clients talk to."""
