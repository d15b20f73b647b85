from calculator import Calculator


def test_add():
    assert Calculator().add(2, 3) == 5


def test_subtract():
    assert Calculator().subtract(5, 3) == 2


def test_multiply():
    assert Calculator().multiply(4, 3) == 12


def test_divide():
    assert Calculator().divide(7, 2) == 3.5


def test_power():
    assert Calculator().power(2, 5) == 32
