"""Configs: a node's configuration file (node_config) and the [broker] settings in it
(broker_settings), Kafka's ConfigDef checks (config_def), topic and group configs
(topic_config, group_config), and which topics are Kafka's internal ones
(internal_topics)."""
