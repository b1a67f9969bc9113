"""Problems (datasets + vocabulary + direction), installed as `t2t_lite.problems`.

    >>> from t2t_lite.problems import get_problem
    >>> get_problem("translate_ende_rev").source_language
    'de'
"""

from t2t_lite.problems.base import (  # noqa: F401
    Problem, ReversedProblem, VocabProblem, get_problem, import_usr_dir)
from t2t_lite.problems.translation import (  # noqa: F401
    TfdsTranslateProblem, TranslateProblem)
from t2t_lite.problems import algorithmic, parsing, translation  # noqa: F401  (registers the problems)
