import pytest

import ipukit as ipu


def test_fields_in_definition_order_and_inherited():
    class A(ipu.Vertex):
        x = ipu.Input(ipu.Vector(ipu.FLOAT))
        out = ipu.Output(ipu.FLOAT)

    class B(A):
        count = ipu.State(ipu.INT)
        acc = ipu.InOut(ipu.Vector(ipu.HALF))

    assert list(B.fields) == ["x", "out", "count", "acc"]
    assert B.fields["acc"].vector and B.fields["acc"].dtype == ipu.HALF
    assert B.fields["x"].reads and not B.fields["x"].writes
    assert B.fields["acc"].reads and B.fields["acc"].writes


def test_default_cycle_estimate_counts_elements():
    class A(ipu.Vertex):
        x = ipu.Input(ipu.Vector(ipu.FLOAT))
        out = ipu.Output(ipu.FLOAT)

    assert A.cycle_estimate({"x": 16, "out": 1}) == 10 + 17


def test_unwritten_compute_says_so():
    class A(ipu.Vertex):
        pass

    with pytest.raises(NotImplementedError, match="A.compute"):
        A().compute()


def test_a_subclass_field_replaces_its_base_field_in_place_and_fields_print():
    class A(ipu.Vertex):
        x = ipu.Input(ipu.Vector(ipu.FLOAT))
        out = ipu.Output(ipu.FLOAT)

    class B(A):
        x = ipu.InOut(ipu.Vector(ipu.HALF))

    assert list(B.fields) == ["x", "out"] and B.fields["x"].kind == "inout"
    assert repr(B.fields["x"]) == "Inout(Vector(float16))" and repr(A.fields["out"]) == \
        "Output(float32)"


class Scale(ipu.MultiVertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.out[...] = 3 * self.x


class Plain(ipu.Vertex):
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = 1


def test_multivertex_default_estimate_is_workers_times_an_even_share():
    # PopLibs' estimators: numWorkers x one worker's cycles on ceil(n / W) elements
    assert Scale.cycle_estimate({"x": 16, "out": 16}) == 6 * (10 + 3 + 3)
    assert Scale.cycle_estimate({"x": 12, "out": 12}, workers=4) == 4 * (10 + 3 + 3)
    assert issubclass(Scale, ipu.Vertex)


def _compute_cycles(vertices, tiles=2):
    """Compile one compute set of ``vertices`` = [(class, tile, estimate)]; per-tile cycles
    of its compute phase."""
    dev = ipu.IPUModel(tiles_per_ipu=tiles).create_device()
    g = ipu.Graph(dev.target)
    cs = g.add_compute_set("cs")
    for i, (cls, tile, cycles) in enumerate(vertices):
        n = 4
        t = g.add_variable(ipu.FLOAT, [2 * n if cls is Scale else 1], f"t{i}")
        g.set_tile_mapping(t, tile)
        conn = {"x": t[:n], "out": t[n:]} if cls is Scale else {"out": t[0]}
        g.set_perf_estimate(g.add_vertex(cs, cls, conn, tile=tile), cycles)
    step = next(s for s in ipu.compile_graph(g, [ipu.Execute(cs)]).steps
                if s.kind == "compute")
    return step.tile_compute_cycles.tolist()


def test_a_multivertex_takes_its_estimate_spread_over_all_workers():
    # alone on a tile: the tile is busy for its estimate (each of 6 workers 1/6 of it),
    # exactly, even when 6 does not divide it
    assert _compute_cycles([(Scale, 0, 600), (Scale, 1, 61)]) == [600, 61]
    # beside plain vertices (round-robin, one worker each, a tile busy 6 x its heaviest
    # worker): every worker carries 1/6 of the MultiVertex; worker 0 also the plain 30
    assert _compute_cycles([(Plain, 0, 30), (Scale, 0, 60)]) == [6 * (30 + 10), 0]
    # two plain vertices go to two workers; two MultiVertices add up
    assert _compute_cycles([(Plain, 1, 30), (Plain, 1, 20)]) == [0, 6 * 30]
    assert _compute_cycles([(Scale, 0, 60), (Scale, 0, 120)]) == [180, 0]


def test_a_multivertex_computes_its_whole_tile_at_once():
    dev = ipu.IPUModel(tiles_per_ipu=2).create_device()
    g = ipu.Graph(dev.target)
    x = g.add_variable(ipu.FLOAT, [10], "x")
    out = g.add_variable(ipu.FLOAT, [10], "out")
    cs = g.add_compute_set("scale")
    for tile, s in ((0, slice(0, 7)), (1, slice(7, 10))):
        g.set_tile_mapping(x[s], tile)
        g.set_tile_mapping(out[s], tile)
        g.add_vertex(cs, Scale, {"x": x[s], "out": out[s]}, tile=tile)
    g.set_initial_value(x, list(range(10)))
    g.create_host_read("out", out)
    eng = ipu.Engine(g, ipu.Execute(cs))
    eng.load(dev)
    eng.run()
    assert eng.read_tensor("out").tolist() == [3.0 * i for i in range(10)]


def test_multivertex_estimate_override_without_workers_is_refused_where_it_is_written():
    """Compile passes the target's worker count to a MultiVertex's estimate, so an
    override written like Vertex's (sizes only) is refused when the class is defined,
    naming the codelet and the signature to write."""
    with pytest.raises(ipu.CodeletError, match=r"Busy\.cycle_estimate must take \(sizes, "
                       r"workers\).*def cycle_estimate\(cls, sizes, workers=6\)"):
        class Busy(ipu.MultiVertex):
            x = ipu.InOut(ipu.Vector(ipu.FLOAT))

            @classmethod
            def cycle_estimate(cls, sizes):
                return 7

    class Fine(ipu.MultiVertex):
        x = ipu.InOut(ipu.Vector(ipu.FLOAT))

        @classmethod
        def cycle_estimate(cls, sizes, workers=6):
            return workers * 7

    assert Fine.cycle_estimate({"x": 3}, 4) == 28
