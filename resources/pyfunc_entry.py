"""The MLflow "model from code" entry point of every registered foxhunt model: MLflow copies
this file into the model and runs it at load time, so no pickled object is stored."""

import mlflow.models

from resources.pyfunc_models import FoxhuntModel

mlflow.models.set_model(FoxhuntModel())
