"""RocketMQ's broker filter package: SQL92 subscriptions compiled per consumer group and topic
(:mod:`.consumer_filter_manager`) and applied to pulls (:mod:`.expression_message_filter`)."""
