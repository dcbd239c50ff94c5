"""realm_core: the science of REALM (Guu et al. 2020). Never imports Prefect."""

__version__ = "0.1.0"
