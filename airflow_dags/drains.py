"""The DAGs `make airflow` serves: the drains of DRAINER_CONFIG (else this repository's
drains.yaml) rendered by drainer.airflow.drain_dags; the other files of this folder are none."""

from drainer.airflow import drain_dags

dags = drain_dags()
