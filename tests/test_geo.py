"""City table and link models."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hulk_env.errors import HulkInputError
from hulk_env.hardware import geo
from hulk_env.units import GBPS, MS


def test_paper_cities_first_and_spelled_as_the_data():
    assert geo.PAPER_CITIES == (
        "Beijing", "Neimeng", "Nanjing", "Quanzhou", "California", "Tokyo",
        "Berlin", "London", "New Delhi", "Paris", "Rome", "Brasilia",
    )  # fmt: skip
    assert all(name in geo.CITIES for name in geo.PAPER_CITIES)


def test_at_least_40_cloud_cities_on_every_continent():
    others = [c for c in geo.CITIES.values() if c.name not in geo.PAPER_CITIES]
    assert len(others) >= 40
    continents = {c.continent for c in others}
    assert {"Africa", "Asia", "Europe", "North America", "South America", "Oceania"} <= continents


def test_coordinates_in_range_and_distinct():
    coords = [(c.lat, c.lon) for c in geo.CITIES.values()]
    assert all(-90 <= lat <= 90 and -180 <= lon <= 180 for lat, lon in coords)
    assert len(set(coords)) == len(coords)


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        (" neimeng ", "Neimeng"),
        ("HOHHOT", "Neimeng"),
        ("new  delhi", "New Delhi"),
        ("São Paulo", "Sao Paulo"),
        ("san jose", "California"),
        ("Oregon", "Boardman"),
    ],
)
def test_lookup_ignores_case_space_accents_and_knows_aliases(spelling, name):
    assert geo.get_city(spelling).name == name


def test_unknown_city_suggests_close_matches():
    with pytest.raises(HulkInputError, match=r"unknown city 'Frankfort'; did you mean Frankfurt"):
        geo.get_city("Frankfort")
    with pytest.raises(HulkInputError, match=r"unknown city 'Xyzzy'.*Beijing"):
        geo.get_city("Xyzzy")
    assert geo.find_city("Xyzzy") is None


def test_great_circle_known_distances():
    lon, par = geo.CITIES["London"], geo.CITIES["Paris"]
    assert geo.great_circle_km(lon.lat, lon.lon, par.lat, par.lon) == pytest.approx(344, abs=5)
    assert geo.great_circle_km(0, 0, 0, 180) == pytest.approx(math.pi * geo.EARTH_RADIUS_KM)
    assert geo.great_circle_km(10, 20, 10, 20) == 0.0


def test_great_circle_vectorised_and_symmetric():
    lat = np.array([c.lat for c in geo.CITIES.values()])
    lon = np.array([c.lon for c in geo.CITIES.values()])
    km = geo.great_circle_km(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    assert km.shape == (len(lat), len(lat))
    np.testing.assert_allclose(km, km.T)
    np.testing.assert_allclose(np.diag(km), 0.0, atol=1e-9)


def test_rtt_model_constants():
    assert geo.min_rtt_ms_physical(100) == pytest.approx(1.0)  # 1 ms per 100 km of fibre
    assert geo.rtt_ms_from_km(0) == pytest.approx(geo.RTT_FLOOR_MS)
    assert geo.rtt_ms_from_km(1000) == pytest.approx(geo.RTT_FLOOR_MS + 10 * geo.ROUTE_FACTOR)
    np.testing.assert_allclose(geo.rtt_ms_from_km(np.array([0.0, 1000.0])), [2.0, 18.0])


@given(st.floats(min_value=0, max_value=21_000))
def test_modelled_rtt_never_beats_light(km):
    assert geo.rtt_ms_from_km(km) > geo.min_rtt_ms_physical(km)


def test_wan_bandwidth_fit():
    assert geo.wan_bandwidth_gbps(10) == pytest.approx(1.05)
    assert geo.wan_bandwidth_gbps(154) == pytest.approx(0.5)
    assert geo.wan_bandwidth_gbps(0) == pytest.approx(1.05)
    bw = geo.wan_bandwidth_gbps(np.linspace(1, 500, 50))
    assert np.all(np.diff(bw) <= 0)


def test_link_matrices_lan_wan_and_diagonal():
    cities = [geo.CITIES[n] for n in ("Tokyo", "Tokyo", "Sydney")]
    lat, bw = geo.link_matrices(
        [c.lat for c in cities], [c.lon for c in cities], [c.name for c in cities]
    )
    np.testing.assert_array_equal(np.diag(lat), 0.0)
    assert np.all(np.isinf(np.diag(bw)))
    np.testing.assert_allclose(lat, lat.T)
    assert lat[0, 1] == pytest.approx(geo.LAN_RTT_MS / 2 * MS)
    assert bw[0, 1] == pytest.approx(geo.LAN_BANDWIDTH_GBPS * GBPS)
    km = geo.great_circle_km(cities[0].lat, cities[0].lon, cities[2].lat, cities[2].lon)
    rtt = geo.rtt_ms_from_km(km)
    assert lat[0, 2] == pytest.approx(rtt / 2 * MS)
    assert bw[0, 2] == pytest.approx(geo.wan_bandwidth_gbps(rtt) * GBPS)
