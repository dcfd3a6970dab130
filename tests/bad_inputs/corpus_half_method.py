"""A user method that forgot three of the five required methods (algorithm_import_path_abstract.yaml)."""

from iotfl_sim.strategy import Assignment, Strategy, SubmodelSpec, select_uniform


class HalfMethod(Strategy):
    def setup(self, ctx):
        self.spec = SubmodelSpec(1.0, name="full")

    def select(self, rnd, fleet, rng):
        return [Assignment(int(d), self.spec) for d in select_uniform(fleet, self.c.clients_per_round, rng)]
