"""Problems (datasets + vocabulary + direction), installed as `t2t_lite.problems`."""
